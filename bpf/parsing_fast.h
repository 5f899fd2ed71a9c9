/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The parser's fast path: the common frame (untagged, IPv4 without options
 * or IPv6 without extension headers, an unfragmented TCP or UDP packet) in
 * one straight line, with one bounds check against the frame for every
 * header the checks read. It makes the checks the general walk (parsing.h)
 * makes, in the same terms; anything it does not take to the end (another
 * shape, or a check that fails) goes to that walk from the start, which
 * then says what is wrong. A failing check therefore
 * costs twice, a passing one once: floods of well-formed packets are the
 * ones to be cheap. */
#ifndef XDPLIMIT_PARSING_FAST_H
#define XDPLIMIT_PARSING_FAST_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_endian.h>
#include "parsing_defs.h"
#include "csum.h"

/* The fast path writes the parsed packet as the seven 64-bit words of
 * struct xdpl_pkt, each assembled in registers, instead of zeroing it and
 * then storing field by field: the flow cache (flows.h) reads the packet
 * back as whole words right away, and a word load that spans several
 * narrower stores still in flight cannot be forwarded from them; it waits
 * for them to reach the cache (measured in one interleaved run: 1-2 ns
 * more a packet for a flow cache hit and for parse plus an empty policy).
 * The offsets are pinned by the asserts below. */
#define XDPL_FAST_AT(field, off)                                                                   \
	_Static_assert(__builtin_offsetof(struct xdpl_pkt, field) == (off),                        \
		       "parsing_fast.h writes xdpl_pkt." #field " at byte " #off)
XDPL_FAST_AT(family, 4);
XDPL_FAST_AT(proto, 5);
XDPL_FAST_AT(ports, 6);
XDPL_FAST_AT(tcp_flags, 7);
XDPL_FAST_AT(sport, 8);
XDPL_FAST_AT(dport, 10);
XDPL_FAST_AT(vlan, 12);
XDPL_FAST_AT(unparsed, 14);
XDPL_FAST_AT(long_chain, 15);
XDPL_FAST_AT(iplen, 16);
XDPL_FAST_AT(ttl, 18);
XDPL_FAST_AT(tos, 19);
XDPL_FAST_AT(saddr, 20);
XDPL_FAST_AT(daddr, 36);
XDPL_FAST_AT(icmp, 52);
XDPL_FAST_AT(payload, 56);
XDPL_FAST_AT(payload_len, 58);
_Static_assert(sizeof(struct xdpl_pkt) == 64, "parsing_fast.h writes xdpl_pkt as eight words");

/* What the transport header gives the packet's first two words: the
 * protocol and TCP flags (word 0 above 32 bits), the ports and the VLAN
 * (word 1; unparsed and long_chain 0); and its length (hl), which places
 * the payload (word 7). */
struct xdpl_fast_l4w {
	__u64 w0;
	__u64 w1;
	__u32 hl;
};

/* The transport checks both IP versions share: left is what the IP length
 * leaves after the IP header. 1 when the header passes, with *o filled. */
static __always_inline int xdpl_fast_l4(__u8 *l4, void *end, __u8 proto, __u32 left,
					struct xdpl_fast_l4w *o)
{
	__u64 flags = 0;
	__u32 hl = 8;

	if (proto == IPPROTO_UDP) {
		__u32 ulen = (__u32)l4[4] << 8 | l4[5];

		/* 0 is an IPv6 jumbogram's: left to the walk. */
		if (ulen < 8 || ulen > left)
			return 0;
	} else if (proto == IPPROTO_TCP) {
		if ((void *)(l4 + 20) > end)
			return 0;
		__u32 doff = (l4[12] >> 4) * 4;

		if (doff < 20 || doff > left)
			return 0;
		flags = l4[13];
		hl = doff;
	} else {
		return 0;
	}
	__u64 sport = (__u16)l4[0] << 8 | l4[1];
	__u64 dport = (__u16)l4[2] << 8 | l4[3];

	o->w0 = (__u64)proto << 40 | (__u64)XDPL_PORTS_OK << 48 | flags << 56;
	o->w1 = sport | dport << 16 | (__u64)XDPL_VLAN_IDX_UNTAGGED << 32;
	o->hl = hl;
	return 1;
}

/* ip_rcv_core's checks for a header without options and no fragment. */
static __always_inline int xdpl_fast_ipv4(void *data, void *end, __u32 len, struct xdpl_pkt *p)
{
	struct iphdr *iph = data + sizeof(struct ethhdr);
	__u8 *l4 = (void *)(iph + 1);
	struct xdpl_fast_l4w o;

	/* The shortest frame taken: the IP header and a UDP header. */
	if ((void *)(l4 + 8) > end)
		return 0;
	if (*(__u8 *)iph != 0x45 || (iph->frag_off & bpf_htons(XDPL_IP_MF | XDPL_IP_OFFMASK)))
		return 0;
	__u32 tot = bpf_ntohs(iph->tot_len);

	if (tot < sizeof(*iph) || sizeof(struct ethhdr) + tot > len)
		return 0;
	__u32 *w = (__u32 *)iph;

	if (csum_fold32s((__u64)w[0] + w[1] + w[2] + w[3] + w[4]) != 0xffff)
		return 0;
	if (!xdpl_fast_l4(l4, end, iph->protocol, tot - sizeof(*iph), &o))
		return 0;
	__u64 *pw = (__u64 *)p;

	pw[0] = len | 4ULL << 32 | o.w0;
	pw[1] = o.w1;
	pw[2] = tot | (__u64)iph->ttl << 16 | (__u64)iph->tos << 24 | (__u64)iph->saddr << 32;
	pw[3] = 0;
	pw[4] = (__u64)iph->daddr << 32;
	pw[5] = 0;
	pw[6] = 0;
	/* A UDP header's own length may be shorter than the IP packet's:
	 * the stack trims the datagram to it, so the payload ends there. */
	__u32 left = tot - sizeof(*iph);

	if (iph->protocol == IPPROTO_UDP)
		left = (__u32)l4[4] << 8 | l4[5];
	pw[7] = (__u64)(sizeof(struct ethhdr) + sizeof(*iph) + o.hl) | (__u64)(left - o.hl) << 16;
	return 1;
}

/* ipv6_rcv's checks for a header followed directly by TCP or UDP. */
static __always_inline int xdpl_fast_ipv6(void *data, void *end, __u32 len, struct xdpl_pkt *p)
{
	struct ipv6hdr *ip6 = data + sizeof(struct ethhdr);
	__u8 *l4 = (void *)(ip6 + 1);
	struct xdpl_fast_l4w o;

	if ((void *)(l4 + 8) > end)
		return 0;
	if ((*(__u8 *)ip6 & 0xf0) != 0x60)
		return 0;
	__u32 plen = bpf_ntohs(ip6->payload_len);

	if (sizeof(struct ethhdr) + sizeof(*ip6) + plen > len)
		return 0;
	if (!xdpl_fast_l4(l4, end, ip6->nexthdr, plen, &o))
		return 0;
	__u64 *pw = (__u64 *)p;
	__u32 *s = (__u32 *)&ip6->saddr, *d = (__u32 *)&ip6->daddr;
	__u64 tos = ip6->priority << 4 | ip6->flow_lbl[0] >> 4;

	pw[0] = len | 6ULL << 32 | o.w0;
	pw[1] = o.w1;
	/* iplen is 16 bits wide, as the field it fills (the frame check
	 * above already keeps 40 + plen far below 2^16). */
	__u64 iplen = (__u16)(sizeof(*ip6) + plen);

	pw[2] = iplen | (__u64)ip6->hop_limit << 16 | tos << 24 | (__u64)s[0] << 32;
	pw[3] = s[1] | (__u64)s[2] << 32;
	pw[4] = s[3] | (__u64)d[0] << 32;
	pw[5] = d[1] | (__u64)d[2] << 32;
	pw[6] = d[3];
	__u32 left = plen;

	if (ip6->nexthdr == IPPROTO_UDP)
		left = (__u32)l4[4] << 8 | l4[5];
	pw[7] = (__u64)(sizeof(struct ethhdr) + sizeof(*ip6) + o.hl) | (__u64)(left - o.hl) << 16;
	return 1;
}

#endif
