/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The datapath's per-CPU counters, read and summed by the control plane:
 * the global ones (XDPL_C_*) and the frames the parser could not judge, by
 * kind (XDPL_UP_*). */
#ifndef XDPLIMIT_COUNTERS_H
#define XDPLIMIT_COUNTERS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "xdplimit_maps.h"

/* Per-CPU: no other CPU writes the slot, so no atomics. */
static __always_inline void xdpl_count(__u32 idx, __u64 bytes)
{
	struct xdpl_counter *c = bpf_map_lookup_elem(&xdpl_counters, &idx);

	if (c) {
		c->packets++;
		c->bytes += bytes;
	}
}

/* A frame of unparsed kind `kind` (XDPL_UP_*): every frame counted, and
 * dropped ones apart. */
static __always_inline void xdpl_unparsed_count(__u32 kind, struct xdpl_pkt *p, int dropped)
{
	struct xdpl_unparsed_stats *st = bpf_map_lookup_elem(&xdpl_unparsed_counts, &kind);

	if (!st)
		return;
	st->packets++;
	st->bytes += p->len;
	if (dropped) {
		st->dropped++;
		st->dropped_bytes += p->len;
	}
}

#endif
