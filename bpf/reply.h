/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* What the answers the datapath sends share: the SYN-ACKs of syncookie.h
 * and the resets and ICMP errors of reject.h. An answer is built in the
 * frame of the packet it answers: its headers on the stack, written over
 * the packet's with bpf_xdp_store_bytes, the frame cut or grown to the
 * answer's length with bpf_xdp_adjust_tail, the MACs swapped, VLAN tags
 * kept as received; the caller returns XDP_TX. */
#ifndef XDPLIMIT_REPLY_H
#define XDPLIMIT_REPLY_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_endian.h>
#include "xdplimit_consts.h"
#include "parsing_defs.h"
#include "csum.h"

#define XDPL_TCP_FIN 0x01
#define XDPL_TCP_SYN 0x02
#define XDPL_TCP_RST 0x04
#define XDPL_TCP_ACK 0x10
#define XDPL_TCP_ECE 0x40
#define XDPL_TCP_CWR 0x80

/* The offset of a frame's IP header, behind at most XDPL_REPLY_MAX_TAGS
 * VLAN tags, and its ethertype (network order): 0, or -1 for a frame too
 * short to say. */
static __always_inline int xdpl_l3_at(struct xdp_md *ctx, __u32 *l3, __be16 *ethertype)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 off = 12;

	if (data + ETH_HLEN > end)
		return -1;
	__be16 proto = *(__be16 *)(data + off);

#pragma unroll
	for (int i = 0; i < XDPL_REPLY_MAX_TAGS; i++) {
		if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD))
			break;
		off += 4;
		if (data + off + 2 > end)
			return -1;
		proto = *(__be16 *)(data + off);
	}
	*l3 = off + 2;
	*ethertype = proto;
	return 0;
}

/* Where the IP and TCP headers of a segment are. */
struct xdpl_segment {
	__u32 l3;    /* offset of the IP header */
	__u32 l4;    /* offset of the TCP header */
	__u32 thlen; /* TCP header length, 20 to 60 */
	__u32 family;
};

/* Finds the headers of a TCP segment the parser judged, in the shapes an
 * answer is built for: behind at most XDPL_REPLY_MAX_TAGS VLAN tags, IPv4
 * unfragmented (options allowed) or IPv6 without extension headers. 0, or
 * -1 for any other shape. */
static __always_inline int xdpl_segment_at(struct xdp_md *ctx, struct xdpl_segment *s)
{
	__u32 off;
	__be16 proto;

	if (xdpl_l3_at(ctx, &off, &proto))
		return -1;
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;

	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = data + off;

		if ((void *)(ip + 1) > end || ip->ihl < 5 || ip->protocol != IPPROTO_TCP ||
		    (ip->frag_off & bpf_htons(XDPL_IP_MF | XDPL_IP_OFFMASK)))
			return -1;
		s->l4 = off + ip->ihl * 4;
		s->family = 4;
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = data + off;

		if ((void *)(ip6 + 1) > end || ip6->nexthdr != IPPROTO_TCP)
			return -1;
		s->l4 = off + sizeof(*ip6);
		s->family = 6;
	} else {
		return -1;
	}
	s->l3 = off;
	__u32 l4 = s->l4;
	__u8 *doff = data + (l4 & 0xff) + 12;

	if ((void *)(doff + 1) > end)
		return -1;
	s->thlen = (*doff >> 4) * 4;
	if (s->thlen < 20 || data + l4 + s->thlen > end)
		return -1;
	return 0;
}

/* The one's complement sum of n 32-bit words as loaded: byte order does
 * not matter to it (csum.h), so the result stores back as the checksum. */
static __always_inline __u16 xdpl_csum_words(__u32 *w, __u32 n, __u64 sum)
{
#pragma unroll
	for (int i = 0; i < 10; i++)
		if (i < n)
			sum += w[i];
	return ~csum_fold32s(sum) & 0xffff;
}

/* The packet's addresses, read into the IP header an answer builds in ip
 * (10 words), where each family's header has them: ip[3..4] for IPv4,
 * ip[2..9] for IPv6. 0, or -1. Each family keeps its own call: clang
 * merges the two into one call whose offset, size and buffer each pick a
 * family on a test of their own, and 6.1's verifier, which does not know
 * the three tests agree, then finds an IPv6 size at the IPv4 buffer (the
 * empty asm makes the two tails differ, as in state.h). */
static __always_inline int xdpl_reply_addrs(struct xdp_md *ctx, __u32 l3, __u32 family, __u32 *ip)
{
	if (family == 4) {
		long err = bpf_xdp_load_bytes(ctx, l3 + 12, &ip[3], 8);

		asm volatile("" : "+r"(err));
		return err ? -1 : 0;
	}
	return bpf_xdp_load_bytes(ctx, l3 + 8, &ip[2], 32) ? -1 : 0;
}

/* Turns ip, holding the packet's addresses (xdpl_reply_addrs), into the
 * answer's IP header: the addresses swapped, protocol proto, l4len bytes
 * of payload, ttl (the hop limit for IPv6), IPv4's TOS tos and DF. Returns
 * the sum of the pseudo-header TCP and ICMPv6 checksums cover. */
static __always_inline __u64 xdpl_reply_ip(__u32 *ip, __u32 family, __u32 proto, __u32 l4len,
					   __u32 ttl, __u32 tos)
{
	__u64 pseudo;

	if (family == 4) {
		__u32 src = ip[3];

		ip[3] = ip[4];
		ip[4] = src;
		ip[0] = bpf_htonl(0x45 << 24 | tos << 16 | (20 + l4len));
		ip[1] = bpf_htonl(0x4000); /* DF */
		ip[2] = bpf_htonl(ttl << 24 | proto << 16);
		ip[2] |= (__u32)xdpl_csum_words(ip, 5, 0) << 16;
		return (__u64)ip[3] + ip[4] + bpf_htonl(proto << 16 | l4len);
	}
	pseudo = (__u64)bpf_htonl(l4len) + bpf_htonl(proto);
#pragma unroll
	for (int i = 2; i < 6; i++) {
		__u32 src = ip[i];

		ip[i] = ip[i + 4];
		ip[i + 4] = src;
		pseudo += (__u64)ip[i] + ip[i + 4];
	}
	ip[0] = bpf_htonl(0x60000000);
	ip[1] = bpf_htonl(l4len << 16 | proto << 8 | ttl);
	return pseudo;
}

/* Swaps the frame's MACs: the answer goes back to the sender. 0, or -1.
 * In the frame itself, not through a copy on the stack: the SYN-ACK's
 * function, its option parser's callback and xdpl_main share 6.1's 512
 * bytes of stack. */
static __always_inline int xdpl_reply_macs(struct xdp_md *ctx)
{
	__u8 *eth = (void *)(long)ctx->data;

	if ((void *)(eth + 12) > (void *)(long)ctx->data_end)
		return -1;
#pragma unroll
	for (int i = 0; i < 6; i++) {
		__u8 b = eth[i];

		eth[i] = eth[i + 6];
		eth[i + 6] = b;
	}
	return 0;
}

#endif
