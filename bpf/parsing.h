/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Header parsing that follows the Linux receive path: a frame the stack would
 * deliver is parsed to its transport header and judged; a frame the stack
 * would drop (truncated, a length or header field ip_rcv_core or
 * ipv6_rcv refuses, a bad IPv4 header checksum) is "unparsed" and goes to the
 * policy's unparsed action, never charged to a rule. Every read is checked
 * against data_end, and the IP end (total or payload length: the stack trims
 * the frame to it) bounds the transport header. The VLAN and IPv6
 * extension-header walks are bounded; beyond the bounds:
 *   - VLAN tags: followed to the end (as many as a frame can hold);
 *   - more than XDPL_MAX_IPV6_EXT extension headers: judged by source as a
 *     non-first fragment is (protocol, ports and flags unknown, treated as
 *     matching every rule), never waved through. */
#ifndef XDPLIMIT_PARSING_H
#define XDPLIMIT_PARSING_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_endian.h>
#include "xdplimit_consts.h"
#include "xdplimit_structs.h"
#include "csum.h"

#ifndef ETH_P_8021AD
#define ETH_P_8021AD 0x88A8
#endif
#define XDPL_IPPROTO_SCTP    132
#define XDPL_IPPROTO_UDPLITE 136
#define XDPL_IPPROTO_ICMPV6  58
#define XDPL_IPV6_HOPOPTS    0
#define XDPL_IPV6_ROUTING    43
#define XDPL_IPV6_FRAGMENT   44
#define XDPL_IPV6_AH	     51
#define XDPL_IPV6_DSTOPTS    60
#define XDPL_IPV6_MOBILITY   135
#define XDPL_IPV6_HIP	     139
#define XDPL_IPV6_SHIM6	     140
#define XDPL_IPV6_EXP1	     253
#define XDPL_IPV6_EXP2	     254
#define XDPL_IP_MF	     0x2000
#define XDPL_IP_OFFMASK	     0x1fff
/* No XDP frame without frags support is longer than a page; offsets are
 * clamped to this so that the verifier can bound the cursor. */
#define XDPL_MAX_FRAME 8192

enum xdpl_parse_result {
	XDPL_PARSE_OK = 0,
	XDPL_PARSE_NOT_IP = 1,
	XDPL_PARSE_UNPARSED = 2, /* p->unparsed says why */
};

enum xdpl_ports {
	XDPL_PORTS_NONE = 0, /* protocol without ports */
	XDPL_PORTS_OK = 1,
	XDPL_PORTS_FRAG = 2, /* fragment or long chain: ports unknown */
};

/* How a bounded walk (VLAN tags, IPv6 extension headers) ended. */
enum {
	XDPL_WALK_DONE = 0,	 /* the next header is not one the walk follows */
	XDPL_WALK_TRUNCATED = 1, /* a header runs past the frame or the IP end */
	XDPL_WALK_LONG = 2,	 /* the bound reached and more follow */
};

/* Offsets from the start of the frame: off is the next header, lim the end
 * of the IP packet (never beyond the frame). */
struct xdpl_cursor {
	void *data;
	void *end;
	__u32 off;
	__u32 lim;
	__u8 frag; /* any fragment, first included: the stack reassembles */
};

struct xdpl_vlan_hdr {
	__be16 tci;
	__be16 proto;
};

struct xdpl_ip6_ext {
	__u8 nexthdr;
	__u8 hdrlen;
};

struct xdpl_ip6_frag {
	__u8 nexthdr;
	__u8 reserved;
	__be16 frag_off;
	__be32 id;
};

static __always_inline int xdpl_unparsed_kind(struct xdpl_pkt *p, __u8 kind)
{
	p->unparsed = kind + 1;
	return XDPL_PARSE_UNPARSED;
}

/* A pointer to n bytes at c->off, or NULL when they run past the IP end
 * (or the frame: the second check is the one the verifier needs). */
static __always_inline void *xdpl_at(struct xdpl_cursor *c, __u32 n)
{
	__u32 off = c->off;

	if (off > XDPL_MAX_FRAME || off + n > c->lim)
		return NULL;
	void *ptr = c->data + off;

	if (ptr + n > c->end)
		return NULL;
	return ptr;
}

_Static_assert((XDPL_MAX_VLAN_TAGS + XDPL_MAX_VLAN_WALK) * 4 >= 4096,
	       "every tag a 4 KiB frame can hold is walked");

/* The walk of VLAN tags beyond the first XDPL_MAX_VLAN_TAGS, in and out of
 * xdpl_vlan_walk. */
struct xdpl_vwalk {
	struct xdp_md *ctx;
	__u32 off;    /* in: the tag to read; out: the header after the last */
	__u32 lim;    /* the frame's length */
	__be16 proto; /* in: the ethertype that announced it; out: the last */
	__u16 status; /* out: XDPL_WALK_* (parsing.h) */
};

/* One step of the walk: the tag at w->off. 1 stops bpf_loop. */
static long xdpl_vlan_step(__u64 i, void *arg)
{
	struct xdpl_vwalk *w = arg;
	struct xdpl_vlan_hdr vh;

	if (w->proto != bpf_htons(ETH_P_8021Q) && w->proto != bpf_htons(ETH_P_8021AD)) {
		w->status = XDPL_WALK_DONE;
		return 1;
	}
	if (w->off > XDPL_MAX_FRAME || w->off + sizeof(vh) > w->lim ||
	    bpf_xdp_load_bytes(w->ctx, w->off, &vh, sizeof(vh))) {
		w->status = XDPL_WALK_TRUNCATED;
		return 1;
	}
	w->proto = vh.proto;
	w->off += sizeof(vh);
	return 0;
}

/* Follows tags for at most XDPL_MAX_VLAN_WALK more: as many as a 4 KiB
 * frame can hold, so no frame the program sees on 4 KiB pages runs out of
 * the bound. Linux pops any number of VID-0 tags and delivers the packet; a
 * parser that gave up after a few would let every rule be stepped around
 * by adding tags. A global function, verified once on its own, called only
 * by frames with more than XDPL_MAX_VLAN_TAGS
 * tags. bpf_loop, not a bounded loop: the verifier checks its step once
 * rather than once per iteration (a bounded loop cost it ~100k
 * instructions, and 2048 iterations failed the load). */
__attribute__((noinline)) int xdpl_vlan_walk(struct xdp_md *ctx, struct xdpl_vwalk *w)
{
	if (!w)
		return 0;
	/* bpf_loop's context must be on this function's stack. */
	struct xdpl_vwalk v = *w;

	v.ctx = ctx;
	v.status = XDPL_WALK_LONG;
	bpf_loop(XDPL_MAX_VLAN_WALK, xdpl_vlan_step, &v, 0);
	w->off = v.off;
	w->proto = v.proto;
	w->status = v.status;
	return 0;
}

/* Ethernet and every VLAN tag (802.1Q or 802.1ad, in any order: Linux pops
 * every VID-0 tag and delivers on the base device): the first
 * XDPL_MAX_VLAN_TAGS inline, any more in xdpl_vlan_walk. Returns the
 * ethertype in network order, or 0 with p->unparsed set. */
static __always_inline __be16 xdpl_parse_eth(struct xdp_md *ctx, struct xdpl_cursor *c,
					     struct xdpl_pkt *p)
{
	struct ethhdr *eth = xdpl_at(c, sizeof(*eth));

	if (!eth) {
		xdpl_unparsed_kind(p, XDPL_UP_TRUNCATED);
		return 0;
	}
	c->off += sizeof(*eth);
	__be16 proto = eth->h_proto;

	p->vlan = XDPL_VLAN_IDX_UNTAGGED;
#pragma unroll
	for (int i = 0; i < XDPL_MAX_VLAN_TAGS; i++) {
		if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD))
			return proto;
		struct xdpl_vlan_hdr *vh = xdpl_at(c, sizeof(*vh));

		if (!vh) {
			xdpl_unparsed_kind(p, XDPL_UP_TRUNCATED);
			return 0;
		}
		if (i == 0)
			p->vlan = bpf_ntohs(vh->tci) & 0x0fff;
		proto = vh->proto;
		c->off += sizeof(*vh);
	}
	if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD))
		return proto;

	struct xdpl_vwalk w = {.off = c->off, .lim = c->lim, .proto = proto};

	xdpl_vlan_walk(ctx, &w);
	c->data = (void *)(long)ctx->data;
	c->end = (void *)(long)ctx->data_end;
	c->off = w.off;
	if (w.status == XDPL_WALK_DONE)
		return w.proto;
	xdpl_unparsed_kind(p, w.status == XDPL_WALK_TRUNCATED ? XDPL_UP_TRUNCATED
							      : XDPL_UP_TOO_MANY_VLAN_TAGS);
	return 0;
}

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

/* Transport header within the IP packet, checked as tcp_v4_rcv, udp_rcv and
 * their IPv6 twins check it. A fragment's transport header may be cut short
 * (the stack reassembles first): its ports are then unknown, as a non-first
 * fragment's, and its length fields are not checked. */
static __always_inline int xdpl_l4_short(struct xdpl_cursor *c, struct xdpl_pkt *p)
{
	if (c->frag) {
		p->ports = XDPL_PORTS_FRAG;
		return XDPL_PARSE_OK;
	}
	return xdpl_unparsed_kind(p, XDPL_UP_TRUNCATED);
}

static __always_inline int xdpl_parse_l4(struct xdpl_cursor *c, struct xdpl_pkt *p)
{
	__be16 *ports;

	if (p->ports == XDPL_PORTS_FRAG)
		return XDPL_PARSE_OK;
	switch (p->proto) {
	case IPPROTO_TCP: {
		__u8 *h = xdpl_at(c, 20);

		if (!h)
			return xdpl_l4_short(c, p);
		ports = (__be16 *)h;
		p->tcp_flags = h[13];
		if (c->frag)
			break;
		__u32 doff = (h[12] >> 4) * 4;

		if (doff < 20)
			return xdpl_unparsed_kind(p, XDPL_UP_BAD_HEADER);
		if (c->off + doff > c->lim)
			return xdpl_unparsed_kind(p, XDPL_UP_TRUNCATED);
		break;
	}
	case IPPROTO_UDP: {
		ports = xdpl_at(c, 8);
		if (!ports)
			return xdpl_l4_short(c, p);
		if (c->frag)
			break;
		__u32 left = c->lim - c->off;
		__u32 ulen = bpf_ntohs(ports[2]);

		/* IPv6 jumbograms carry 0: the IP length counts. */
		if (ulen == 0 && p->family == 6)
			ulen = left;
		if (ulen < 8 || ulen > left)
			return xdpl_unparsed_kind(p, XDPL_UP_BAD_LENGTH);
		break;
	}
	case XDPL_IPPROTO_UDPLITE:
		ports = xdpl_at(c, 8);
		if (!ports)
			return xdpl_l4_short(c, p);
		break;
	case XDPL_IPPROTO_SCTP:
		ports = xdpl_at(c, 12);
		if (!ports)
			return xdpl_l4_short(c, p);
		break;
	case IPPROTO_ICMP:
	case XDPL_IPPROTO_ICMPV6: {
		/* Type and code, for the icmp match; a header cut short is
		 * judged as matching every icmp rule (the stack drops it). */
		__u8 *h = xdpl_at(c, 2);

		p->ports = XDPL_PORTS_NONE;
		p->icmp = XDPL_ICMP_UNKNOWN;
		if (h) {
			p->icmp = XDPL_ICMP_OK;
			p->icmp_type = h[0];
			p->icmp_code = h[1];
		}
		return XDPL_PARSE_OK;
	}
	default:
		p->ports = XDPL_PORTS_NONE;
		return XDPL_PARSE_OK;
	}
	p->sport = bpf_ntohs(ports[0]);
	p->dport = bpf_ntohs(ports[1]);
	p->ports = XDPL_PORTS_OK;
	return XDPL_PARSE_OK;
}

/* The general walk (parsing_fast.h's xdpl_parse tries a straight line for
 * the common frame first). */
static __always_inline int xdpl_parse_walk(struct xdp_md *ctx, struct xdpl_pkt *p)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 len = data_end - data;
	struct xdpl_cursor c = {.data = data, .end = data_end, .lim = len};
	int r;

	p->len = len;
	__be16 proto = xdpl_parse_eth(ctx, &c, p);

	if (p->unparsed)
		return XDPL_PARSE_UNPARSED;
	if (proto == bpf_htons(ETH_P_IP))
		r = xdpl_parse_ipv4(&c, p);
	else if (proto == bpf_htons(ETH_P_IPV6))
		r = xdpl_parse_ipv6(ctx, &c, p);
	else
		return XDPL_PARSE_NOT_IP;
	if (r != XDPL_PARSE_OK)
		return r;
	return xdpl_parse_l4(&c, p);
}

#endif
