/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* action reject: a packet a reject rule refuses is answered, when it may
 * be, and goes no further. A TCP segment gets a reset (RFC 9293 3.10.7.1:
 * one acknowledging the segment, a SYN included, when it carries no ACK;
 * else one whose sequence number is the segment's acknowledgment); any
 * other packet an ICMP destination unreachable, administratively
 * prohibited (IPv4 type 3 code 13, ICMPv6 type 1 code 1), quoting the
 * packet from its IP header on. The answer is built in the packet's frame
 * (reply.h) and sent back with XDP_TX, from the address the packet was
 * sent to.
 *
 * So that the limiter is never an amplifier, nor a reflector for forged
 * sources:
 *   - an answer is never longer than the packet it answers: an ICMP error
 *     quotes less of a short packet (RFC 1812 and RFC 4443 ask for as much
 *     as fits in 576 and 1280 bytes), and a packet too short to quote its
 *     IP header and 8 bytes more (what a stack needs to find the socket)
 *     is not answered;
 *   - answers are limited: by a global budget (the policy's reject:
 *     section: a token bucket shared by all CPUs, as a global level's) and
 *     to one a second per source (the time of the last answer in a slot
 *     the source hashes to: sources sharing a slot share the second, which
 *     only answers less);
 *   - no packet from or to an address that is not one host's (unspecified,
 *     loopback, multicast, IPv4's limited broadcast and class E,
 *     IPv4-mapped IPv6), sent to a link-layer group address, an ICMP
 *     error, a reset or a non-first fragment is answered (RFC 1122 3.2.2,
 *     RFC 4443 2.4 (e)). A subnet's directed broadcast address is not
 *     known here: such a packet is sent to the link-layer broadcast, which
 *     is never answered; as a source it is one a router does not deliver
 *     to (RFC 2644).
 * A packet not answered is dropped, and counted under the reason. */
#ifndef XDPLIMIT_REJECT_H
#define XDPLIMIT_REJECT_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <bpf/bpf_endian.h>
#include "xdplimit_maps.h"
#include "parsing_defs.h"
#include "atomics.h"
#include "clock.h"
#include "hash.h"
#include "limiters.h"
#include "sketch.h"
#include "reply.h"

/* xdpl_reject's answer for a packet answered; any other is the counter of
 * the reason it was not (XDPL_C_REJECT_*). */
#define XDPL_REJECT_SENT 0

/* ICMP types Linux never answers (icmp_send): the errors, and the types it
 * does not know. */
static __always_inline int xdpl_icmp4_error(__u8 type)
{
	return type == 3 || type == 4 || type == 5 || type == 11 || type == 12 || type > 18;
}

/* Whether an IPv4 address (network order) is not one host's: 0.0.0.0/8,
 * 127.0.0.0/8, multicast, class E and the limited broadcast. */
static __always_inline int xdpl_not_host4(__be32 a)
{
	__u32 h = bpf_ntohl(a);

	return (h >> 24) == 0 || (h >> 24) == 127 || (h >> 28) >= 0xe;
}

/* Whether an IPv6 source is not one host's: ::, ::1, multicast,
 * IPv4-mapped. */
static __always_inline int xdpl_not_host6(const __be32 *a)
{
	if ((bpf_ntohl(a[0]) >> 24) == 0xff)
		return 1;
	if (a[0] || a[1])
		return 0;
	return (a[2] == 0 && (a[3] == 0 || a[3] == bpf_htonl(1))) || a[2] == bpf_htonl(0xffff);
}

/* Whether packet p may never be answered (see the top of this file). */
static __always_inline int xdpl_reject_never(struct xdp_md *ctx, struct xdpl_pkt *p)
{
	__u8 *dmac = (void *)(long)ctx->data;

	if ((void *)(dmac + 1) > (void *)(long)ctx->data_end || (*dmac & 1))
		return 1;
	if (p->ports == XDPL_PORTS_FRAG)
		return 1;
	if (p->proto == IPPROTO_TCP && (p->tcp_flags & XDPL_TCP_RST))
		return 1;
	if (p->family == 4) {
		if (p->proto == IPPROTO_ICMP &&
		    (p->icmp != XDPL_ICMP_OK || xdpl_icmp4_error(p->icmp_type)))
			return 1;
		return xdpl_not_host4(p->saddr[0]) || xdpl_not_host4(p->daddr[0]);
	}
	if (p->proto == XDPL_IPPROTO_ICMPV6 && (p->icmp != XDPL_ICMP_OK || p->icmp_type < 128))
		return 1;
	return xdpl_not_host6(p->saddr) || (bpf_ntohl(p->daddr[0]) >> 24) == 0xff;
}

/* Takes one answer from the budgets: XDPL_REJECT_SENT, or the counter of
 * the one that is spent. The global budget is read first, so that a flood
 * that spent it costs one read of a word no CPU writes; then the source's
 * second is claimed, then the budget charged, and the second given back
 * when another CPU spent the budget in between. */
static __always_inline int xdpl_reject_take(struct xdpl_pkt *p, struct xdpl_level *budget)
{
	__u32 zero = 0;
	struct xdpl_state *b = bpf_map_lookup_elem(&xdpl_reject_budget, &zero);
	__u64 h = xdpl_fmix64(xdpl_sketch_seed ^ p->saddr[0]);

	if (p->family == 6) {
		h = xdpl_fmix64(h ^ p->saddr[1]);
		h = xdpl_fmix64(h ^ p->saddr[2]);
		h = xdpl_fmix64(h ^ p->saddr[3]);
	}
	__u32 k = h & (XDPL_REJECT_SOURCE_SLOTS - 1);
	__u64 *last = bpf_map_lookup_elem(&xdpl_reject_sources, &k);
	struct xdpl_clk clk;

	if (!b || !last)
		return XDPL_C_REJECT_BUDGET;
	xdpl_clk_start(&clk);
	__u64 now = xdpl_now(&clk, budget->flags);

	if (xdpl_token_bucket(b, budget, now, 1, 0) <= 0)
		return XDPL_C_REJECT_BUDGET;
	__u64 t = xdpl_now(&clk, 0);
	__u64 seen = XDPL_READ_ONCE(*last);

	/* Signed: another CPU may have stored a later time. */
	if (seen && (__s64)(t - seen) < XDPL_REJECT_SOURCE_NS)
		return XDPL_C_REJECT_SOURCE;
	if (__sync_val_compare_and_swap(last, seen, t) != seen)
		return XDPL_C_REJECT_SOURCE;
	if (xdpl_token_bucket(b, budget, now, 1, 1) > 0)
		return XDPL_REJECT_SENT;
	__sync_val_compare_and_swap(last, t, seen);
	return XDPL_C_REJECT_BUDGET;
}

/* Where a packet's answer goes: its IP header at l3, of family; for a
 * reset, the TCP header (s.l4, s.thlen); for an ICMP error, the length of
 * the quote. */
struct xdpl_answer {
	struct xdpl_segment s;
	__u32 quote;
};

/* Finds what an ICMP error quotes of packet p: all of it from its IP
 * header on, up to XDPL_REJECT_QUOTE4 or 6 bytes, less by the error's own
 * headers (never longer than p), in whole words (for bpf_csum_diff); at
 * least its IP header and 8 bytes. 0, or -1. */
static __always_inline int xdpl_quote_at(struct xdp_md *ctx, struct xdpl_pkt *p,
					 struct xdpl_answer *a)
{
	__be16 proto;
	__u32 l3;

	if (xdpl_l3_at(ctx, &l3, &proto))
		return -1;
	if (proto != bpf_htons(p->family == 4 ? ETH_P_IP : ETH_P_IPV6))
		return -1;
	__u32 need = 48, cap = XDPL_REJECT_QUOTE6, hdrs = 48;

	if (p->family == 4) {
		__u8 vihl;

		if (bpf_xdp_load_bytes(ctx, l3, &vihl, 1))
			return -1;
		need = (vihl & 0xf) * 4 + 8;
		cap = XDPL_REJECT_QUOTE4;
		hdrs = 28;
	}
	__u32 q = p->iplen > hdrs ? p->iplen - hdrs : 0;

	q = (q > cap ? cap : q) & ~3U;
	if (q < need)
		return -1;
	a->s.l3 = l3;
	a->s.family = p->family;
	a->quote = q;
	return 0;
}

/* Rewrites the TCP segment in ctx into its reset, in place: 0, or -1. */
static __always_inline int xdpl_reset(struct xdp_md *ctx, struct xdpl_pkt *p,
				      struct xdpl_segment *s, __u32 ttl)
{
	__u32 ip[10] = {};
	__u32 th[5];

	if (bpf_xdp_load_bytes(ctx, s->l4, th, 20) || xdpl_reply_addrs(ctx, s->l3, s->family, ip))
		return -1;
	__u32 flags = bpf_ntohl(th[3]) >> 16;
	__u32 hdrs = s->l4 - s->l3 + s->thlen;

	if (p->iplen < hdrs)
		return -1;
	/* What the segment occupies of the sequence space: its data, and its
	 * SYN and FIN. */
	__u32 len = p->iplen - hdrs + !!(flags & XDPL_TCP_SYN) + !!(flags & XDPL_TCP_FIN);
	__u32 t[5] = {};

	t[0] = th[0] >> 16 | th[0] << 16; /* the ports swapped */
	if (flags & XDPL_TCP_ACK) {
		t[1] = th[2];
		t[3] = bpf_htonl(5 << 28 | XDPL_TCP_RST << 16);
	} else {
		t[2] = bpf_htonl(bpf_ntohl(th[1]) + len);
		t[3] = bpf_htonl(5 << 28 | (XDPL_TCP_RST | XDPL_TCP_ACK) << 16);
	}
	__u64 pseudo = xdpl_reply_ip(ip, s->family, IPPROTO_TCP, 20, ttl, 0);
	__u16 check = xdpl_csum_words(t, 5, pseudo);

	__builtin_memcpy((__u8 *)t + 16, &check, 2);
	__u32 il = s->family == 4 ? 20 : 40;

	asm volatile("" : "+r"(il));
	if (il < 20 || il > 40)
		return -1;
	if (bpf_xdp_adjust_tail(ctx, (int)(s->l3 + il + 20) - (int)bpf_xdp_get_buff_len(ctx)))
		return -1;
	if (xdpl_reply_macs(ctx) || bpf_xdp_store_bytes(ctx, s->l3, ip, il) ||
	    bpf_xdp_store_bytes(ctx, s->l3 + il, t, 20))
		return -1;
	return 0;
}

/* The one's complement sum of the quote's n bytes, a multiple of 4 up to
 * XDPL_REJECT_QUOTE6, in chunks bpf_csum_diff takes (512 bytes). -1 on an
 * error. Each bound is a test of its own on the register the helper gets:
 * clang folds two tests of one value into a test of their difference,
 * from which 6.1's verifier learns nothing of the value. */
static __always_inline __s64 xdpl_quote_sum(struct xdpl_reply_buf *q, __u32 n)
{
	__s64 sum = 0;

#pragma unroll
	for (int i = 0; i < 3; i++) {
		if (n <= i * 512)
			break;
		__u32 c = n - i * 512;

		asm volatile("" : "+r"(c));
		if (c > 512)
			c = 512;
		if (c > sizeof(q->b) - i * 512)
			return -1;
		__s64 s = bpf_csum_diff(NULL, 0, (void *)&q->b[i * 512], c, 0);

		if (s < 0)
			return -1;
		sum += (__u32)s;
	}
	return sum;
}

/* Rewrites the packet in ctx into its ICMP error, in place: 0, or -1. */
static __always_inline int xdpl_unreachable(struct xdp_md *ctx, struct xdpl_answer *a, __u32 ttl)
{
	__u32 zero = 0;
	struct xdpl_reply_buf *q = bpf_map_lookup_elem(&xdpl_reply_scratch, &zero);
	__u32 n = a->quote, l3 = a->s.l3, v4 = a->s.family == 4;
	__u32 ip[10] = {};
	__u32 icmp[2] = {};

	/* The bounds the helpers need, tested apart (xdpl_quote_sum). */
	asm volatile("" : "+r"(n));
	if (!q || n > XDPL_REJECT_QUOTE6)
		return -1;
	asm volatile("" : "+r"(n));
	if (n < 28)
		return -1;
	if (bpf_xdp_load_bytes(ctx, l3, q->b, n) || xdpl_reply_addrs(ctx, l3, a->s.family, ip))
		return -1;
	__s64 sum = xdpl_quote_sum(q, n);

	if (sum < 0)
		return -1;
	/* Type, code, checksum; then 4 bytes unused. */
	icmp[0] = v4 ? bpf_htonl(3 << 24 | 13 << 16) : bpf_htonl(1 << 24 | 1 << 16);
	__u64 pseudo = xdpl_reply_ip(ip, a->s.family, v4 ? IPPROTO_ICMP : XDPL_IPPROTO_ICMPV6,
				     8 + n, ttl, v4 ? 0xc0 : 0);
	/* ICMPv6 sums the pseudo-header, ICMP does not. */
	__u16 check = xdpl_csum_words(icmp, 2, (__u64)sum + (v4 ? 0 : pseudo));

	__builtin_memcpy((__u8 *)icmp + 2, &check, 2);
	__u32 il = v4 ? 20 : 40;

	asm volatile("" : "+r"(il));
	if (il < 20 || il > 40)
		return -1;
	if (bpf_xdp_adjust_tail(ctx, (int)(l3 + il + 8 + n) - (int)bpf_xdp_get_buff_len(ctx)))
		return -1;
	if (xdpl_reply_macs(ctx) || bpf_xdp_store_bytes(ctx, l3, ip, il) ||
	    bpf_xdp_store_bytes(ctx, l3 + il, icmp, 8) ||
	    bpf_xdp_store_bytes(ctx, l3 + il + 8, q->b, n))
		return -1;
	return 0;
}

/* Answers packet p, refused by a reject rule of generation gen, in its
 * frame: XDPL_REJECT_SENT (return XDP_TX), or the counter of why it was
 * not (drop it). A global function, verified once. */
__attribute__((noinline)) int xdpl_reject(struct xdp_md *ctx, struct xdpl_pkt *p, __u32 gen)
{
	__u32 zero = 0;
	struct xdpl_control *ctl = bpf_map_lookup_elem(&xdpl_ctl, &zero);
	struct xdpl_answer a = {};

	if (!ctl || !p)
		return XDPL_C_REJECT_UNANSWERED;
	if (xdpl_reject_never(ctx, p))
		return XDPL_C_REJECT_NEVER;
	int tcp = p->proto == IPPROTO_TCP;

	if (tcp ? xdpl_segment_at(ctx, &a.s) : xdpl_quote_at(ctx, p, &a))
		return XDPL_C_REJECT_UNANSWERED;
	struct xdpl_gen_cfg *g = &ctl->gen[gen & 1];
	int spent = xdpl_reject_take(p, &g->reject);

	if (spent != XDPL_REJECT_SENT)
		return spent;
	__u32 ttl = p->family == 4 ? g->synack.ttl : g->synack.hoplimit;

	if (tcp ? xdpl_reset(ctx, p, &a.s, ttl) : xdpl_unreachable(ctx, &a, ttl))
		return XDPL_C_REJECT_UNANSWERED;
	return XDPL_REJECT_SENT;
}

#endif
