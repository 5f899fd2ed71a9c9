/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* IPv4 and IPv6, checked as ip_rcv_core and ipv6_rcv check them, and the
 * walk of an IPv6 extension-header chain (parsing.h). */
#ifndef XDPLIMIT_PARSING_L3_H
#define XDPLIMIT_PARSING_L3_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_endian.h>
#include "parsing_defs.h"
#include "csum.h"

/* The one's complement sum of the IPv4 header, as ip_fast_csum: 0xffff
 * (folded) when the checksum is right. The fixed 20 bytes are summed
 * unrolled; options word by word. */
static __always_inline int xdpl_ipv4_csum_ok(struct xdpl_cursor *c, struct iphdr *iph, __u32 ihl)
{
	__u32 *w = (__u32 *)iph;
	__u64 sum = (__u64)w[0] + w[1] + w[2] + w[3] + w[4];

	/* Options: a bounded loop (ihl < 16), rare enough not to unroll. */
	for (__u32 i = 5; i < ihl && i < 15; i++) {
		__u32 *o = w + i;
		void *o_end = o + 1;

		/* Opaque, so that clang keeps the form the verifier reads
		 * (it would compare o against data_end - 4). */
		asm volatile("" : "+r"(o_end));
		if (o_end > c->end)
			return 0;
		sum += *o;
	}
	return csum_fold32s(sum) == 0xffff;
}

/* The checks of ip_rcv_core, in its order. */
static __always_inline int xdpl_parse_ipv4(struct xdpl_cursor *c, struct xdpl_pkt *p)
{
	struct iphdr *iph = xdpl_at(c, sizeof(*iph));

	if (!iph)
		return xdpl_unparsed_kind(p, XDPL_UP_TRUNCATED);
	if (iph->version != 4 || iph->ihl < 5)
		return xdpl_unparsed_kind(p, XDPL_UP_BAD_HEADER);
	__u32 ihl = iph->ihl;
	__u32 hlen = ihl * 4;

	if (!xdpl_at(c, hlen))
		return xdpl_unparsed_kind(p, XDPL_UP_TRUNCATED);
	if (!xdpl_ipv4_csum_ok(c, iph, ihl))
		return xdpl_unparsed_kind(p, XDPL_UP_BAD_CHECKSUM);
	__u32 tot = bpf_ntohs(iph->tot_len);

	if (c->off + tot > c->lim)
		return xdpl_unparsed_kind(p, XDPL_UP_TRUNCATED);
	if (tot < hlen)
		return xdpl_unparsed_kind(p, XDPL_UP_BAD_LENGTH);
	c->lim = c->off + tot;
	p->family = 4;
	p->proto = iph->protocol;
	p->iplen = tot;
	p->ttl = iph->ttl;
	p->tos = iph->tos;
	p->saddr[0] = iph->saddr;
	p->daddr[0] = iph->daddr;
	c->off += hlen;
	__u16 frag = bpf_ntohs(iph->frag_off);

	if (frag & (XDPL_IP_OFFMASK | XDPL_IP_MF))
		c->frag = 1;
	if (frag & XDPL_IP_OFFMASK)
		p->ports = XDPL_PORTS_FRAG;
	return XDPL_PARSE_OK;
}

/* The extension headers the parser walks: those the kernel's input path
 * follows to a transport protocol (hop-by-hop, routing, fragment,
 * destination options, AH) and those with the same generic layout
 * (mobility, HIP, shim6, experimental: RFC 7045). Anything else is the
 * packet's transport protocol. */
static __always_inline int xdpl_ipv6_ext(__u8 nh)
{
	switch (nh) {
	case XDPL_IPV6_HOPOPTS:
	case XDPL_IPV6_ROUTING:
	case XDPL_IPV6_FRAGMENT:
	case XDPL_IPV6_AH:
	case XDPL_IPV6_DSTOPTS:
	case XDPL_IPV6_MOBILITY:
	case XDPL_IPV6_HIP:
	case XDPL_IPV6_SHIM6:
	case XDPL_IPV6_EXP1:
	case XDPL_IPV6_EXP2:
		return 1;
	}
	return 0;
}

/* The walk of an IPv6 extension-header chain, in and out of
 * xdpl_ipv6_walk. */
struct xdpl_walk {
	__u32 off;     /* in: first header; out: the transport header */
	__u32 lim;     /* the IP end */
	__u8 nh;       /* in: first header's type; out: the last type read */
	__u8 frag;     /* out: a fragment header was seen */
	__u8 nonfirst; /* out: ... with a non-zero offset (walk stopped) */
	__u8 status;   /* out: XDPL_WALK_* */
};

/* 1 when x == 0, else 0, without a branch; x < 2^31. The asm hides x's
 * range from clang, which would otherwise turn this back into a compare
 * (a branch in BPF). */
static __always_inline __u32 xdpl_is_zero(__u32 x)
{
	asm volatile("" : "+r"(x));
	return (x - 1) >> 31;
}

/* Follows the chain for at most XDPL_MAX_IPV6_EXT headers. A global
 * function, verified once on its own: only packets with extension headers
 * pay its call. Its loop body has one path that continues (every header's
 * length is computed without a branch), so the verifier walks it
 * XDPL_MAX_IPV6_EXT times rather than once per combination of header
 * types. */
__attribute__((noinline)) int xdpl_ipv6_walk(struct xdp_md *ctx, struct xdpl_walk *w)
{
	if (!w)
		return 0;
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 off = w->off;
	__u32 lim = w->lim;
	__u32 nh = w->nh;
	__u32 frag = 0;

	w->status = XDPL_WALK_DONE;
	for (int i = 0; i < XDPL_MAX_IPV6_EXT; i++) {
		if (!xdpl_ipv6_ext(nh))
			goto out;
		/* Every extension header is at least 8 bytes. */
		if (off > XDPL_MAX_FRAME || off + 8 > lim)
			goto truncated;
		__u8 *h = data + off;

		if ((void *)(h + 8) > end)
			goto truncated;
		__u32 hl = h[1];
		__u32 fo = ((__u32)h[2] << 8 | h[3]) & 0xfff8;
		__u32 is_ah = xdpl_is_zero(nh ^ XDPL_IPV6_AH);
		__u32 is_frag = xdpl_is_zero(nh ^ XDPL_IPV6_FRAGMENT);
		/* (hdrlen + 1) * 8; AH (hdrlen + 2) * 4; fragment 8. */
		__u32 len = (hl + 1) << 3;

		len += is_ah * (((hl + 2) << 2) - len);
		len += is_frag * (8 - len);
		frag |= is_frag;
		nh = h[0];
		off += len;
		if (off > lim)
			goto truncated;
		if (fo & (0 - is_frag)) {
			w->nonfirst = 1;
			goto out;
		}
	}
	if (xdpl_ipv6_ext(nh))
		w->status = XDPL_WALK_LONG;
out:
	w->off = off;
	w->nh = nh;
	w->frag = frag;
	return 0;
truncated:
	w->status = XDPL_WALK_TRUNCATED;
	goto out;
}

/* The checks of ipv6_rcv: the payload length must fit in the frame, which is
 * trimmed to it; 0 is a jumbogram's only with a hop-by-hop header first
 * (left to the frame's length, as the stack does without a jumbo option). */
static __always_inline int xdpl_parse_ipv6(struct xdp_md *ctx, struct xdpl_cursor *c,
					   struct xdpl_pkt *p)
{
	struct ipv6hdr *ip6 = xdpl_at(c, sizeof(*ip6));

	if (!ip6)
		return xdpl_unparsed_kind(p, XDPL_UP_TRUNCATED);
	if (ip6->version != 6)
		return xdpl_unparsed_kind(p, XDPL_UP_BAD_HEADER);
	__u32 plen = bpf_ntohs(ip6->payload_len);
	__u8 nh = ip6->nexthdr;

	c->off += sizeof(*ip6);
	if (plen || nh != XDPL_IPV6_HOPOPTS) {
		if (c->off + plen > c->lim)
			return xdpl_unparsed_kind(p, XDPL_UP_TRUNCATED);
		c->lim = c->off + plen;
	}
	p->family = 6;
	/* A jumbogram's length is the frame's; clamped to what iplen holds. */
	__u32 iplen = c->lim - c->off + sizeof(*ip6);

	p->iplen = iplen > 0xffff ? 0xffff : iplen;
	p->ttl = ip6->hop_limit;
	p->tos = ip6->priority << 4 | ip6->flow_lbl[0] >> 4;
	__builtin_memcpy(p->saddr, &ip6->saddr, 16);
	__builtin_memcpy(p->daddr, &ip6->daddr, 16);
	p->proto = nh;
	if (!xdpl_ipv6_ext(nh))
		return XDPL_PARSE_OK;

	struct xdpl_walk w = {.off = c->off, .lim = c->lim, .nh = nh};

	xdpl_ipv6_walk(ctx, &w);
	c->data = (void *)(long)ctx->data;
	c->end = (void *)(long)ctx->data_end;
	c->off = w.off;
	c->frag = w.frag;
	p->proto = w.nh;
	if (w.status == XDPL_WALK_TRUNCATED) {
		if (!w.frag)
			return xdpl_unparsed_kind(p, XDPL_UP_TRUNCATED);
		/* Headers after a fragment header may continue in the next
		 * fragment: the stack reassembles before it reads them. Judged
		 * as a fragment of unknown protocol (proto is an extension
		 * header's number: maps match it to every rule). */
		p->ports = XDPL_PORTS_FRAG;
	} else if (w.status == XDPL_WALK_LONG) {
		/* Longer than the bound: judged by source, as a fragment. */
		p->long_chain = 1;
		p->ports = XDPL_PORTS_FRAG;
	} else if (w.nonfirst) {
		p->ports = XDPL_PORTS_FRAG;
	}
	return XDPL_PARSE_OK;
}

#endif
