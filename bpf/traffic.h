/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Samples of every packet, whatever its verdict: one in (mask + 1), into
 * this CPU's ring of xdpl_traffic_samples, with the frame's first bytes
 * (headers and the start of the payload) as they arrived. What a capture
 * (`xdplimit capture`) and a flood's fingerprint are made of; the drop
 * samples (account.h) stay what top and the drop log read. Off unless the
 * generation asks (XDPL_GF_TRAFFIC): then one flag test a packet. */
#ifndef XDPLIMIT_TRAFFIC_H
#define XDPLIMIT_TRAFFIC_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "xdplimit_maps.h"
#include "clock.h"
#include "hash.h"

/* Each CPU's region of xdpl_traffic_samples holds this + 1 samples, set at
 * load from the map's size. */
volatile const __u32 xdpl_traffic_ring_mask = XDPL_TRAFFIC_RING - 1;

#define XDPL_ETH_HLEN 14

/* Samples packet p of frame ctx, one in (mask + 1), decided as packed:
 * why << 24 | verdict << 16 | the rule's counter slot. Published as the
 * drop samples are (account.h, xdpl_sample: seq cleared, the fields, seq
 * set, both atomic exchanges). A global function, verified once: it runs
 * at the end of every path. */
__attribute__((noinline)) int xdpl_traffic_sample(struct xdp_md *ctx, struct xdpl_pkt *p,
						  __u32 mask, __u32 packed)
{
	__u32 zero = 0;
	struct xdpl_drop_ring *ring = bpf_map_lookup_elem(&xdpl_traffic, &zero);

	if (!ctx || !p || !ring)
		return 0;
	/* Seeded per CPU from Go: unpredictable, so a flood cannot time its
	 * packets around the samples. */
	__u32 x = xdpl_xorshift32(ring->rng);

	ring->rng = x;
	if ((x & mask) != 0)
		return 0;
	__u64 written = ring->written;
	__u32 i = bpf_get_smp_processor_id() * (xdpl_traffic_ring_mask + 1) +
		  (written & xdpl_traffic_ring_mask);
	struct xdpl_traffic_sample *d = bpf_map_lookup_elem(&xdpl_traffic_samples, &i);

	if (!d)
		return 0;
	__sync_lock_test_and_set(&d->seq, 0);
	d->ns = xdpl_coarse_ns();
	d->len = p->len;
	d->verdict = packed >> 16;
	d->why = packed >> 24;
	d->slot = packed;
	/* The length bounded right before the copy, with no call between:
	 * a bound the compiler spilled across the clock's helper call came
	 * back unbounded to the verifiers of 6.1 and 6.12. Both bounds are
	 * ranges: 6.1 learns no lower bound from a test against 0. A parsed
	 * frame holds at least its Ethernet header; a shorter one would fail
	 * the copy. */
	__u32 cap = p->len;

	if (cap < XDPL_ETH_HLEN)
		cap = XDPL_ETH_HLEN;
	if (cap > XDPL_TRAFFIC_CAP)
		cap = XDPL_TRAFFIC_CAP;
	if (bpf_xdp_load_bytes(ctx, 0, d->frame, cap))
		cap = 0;
	d->caplen = cap;
	__sync_lock_test_and_set(&d->seq, written + 1);
	ring->written = written + 1;
	return 0;
}

#endif
