/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Ethernet and VLAN tags: every tag, 802.1Q or 802.1ad in any order, as
 * Linux pops them (parsing.h). */
#ifndef XDPLIMIT_PARSING_L2_H
#define XDPLIMIT_PARSING_L2_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <linux/if_ether.h>
#include <bpf/bpf_endian.h>
#include "parsing_defs.h"

struct xdpl_vlan_hdr {
	__be16 tci;
	__be16 proto;
};

_Static_assert((XDPL_MAX_VLAN_TAGS + XDPL_MAX_VLAN_WALK) * 4 >= 4096,
	       "every tag a 4 KiB frame can hold is walked");

/* The walk of VLAN tags beyond the first XDPL_MAX_VLAN_TAGS, in and out of
 * xdpl_vlan_walk. */
struct xdpl_vwalk {
	struct xdp_md *ctx;
	__u32 off;    /* in: the tag to read; out: the header after the last */
	__u32 lim;    /* the frame's length */
	__be16 proto; /* in: the ethertype that announced it; out: the last */
	__u16 status; /* out: XDPL_WALK_* (parsing_defs.h) */
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

#endif
