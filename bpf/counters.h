/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The datapath's per-CPU counters (XDPL_C_*), read and summed by the
 * control plane. */
#ifndef XDPLIMIT_COUNTERS_H
#define XDPLIMIT_COUNTERS_H

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

#endif
