/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The limiter's clock. bpf_ktime_get_ns costs ~35 ns here, a third of a
 * packet's budget; the coarse clock costs ~5 ns but only advances once per
 * scheduler tick. The control plane marks the levels whose burst or window is
 * too short for the tick (XDPL_LF_FINE_CLOCK); only those read the fine
 * clock. Tests and pcap replay inject time through xdpl_clock. */
#ifndef XDPLIMIT_CLOCK_H
#define XDPLIMIT_CLOCK_H

#include <bpf/bpf_helpers.h>
#include "xdplimit_maps.h"

/* Set by the loader before load; the verifier prunes the other branches. */
volatile const __u32 xdpl_clock_mode = XDPL_CLOCK_KTIME;

/* Each clock is read at most once per packet. */
struct xdpl_clk {
	__u64 coarse;
	__u64 fine;
};

static __always_inline __u64 xdpl_now(struct xdpl_clk *clk, __u8 level_flags)
{
	if (xdpl_clock_mode == XDPL_CLOCK_MAP) {
		if (!clk->fine) {
			__u32 zero = 0;
			__u64 *t = bpf_map_lookup_elem(&xdpl_clock, &zero);

			clk->fine = t ? *t : 0;
		}
		return clk->fine;
	}
	if (xdpl_clock_mode == XDPL_CLOCK_COARSE && !(level_flags & XDPL_LF_FINE_CLOCK)) {
		if (!clk->coarse)
			clk->coarse = bpf_ktime_get_coarse_ns();
		return clk->coarse;
	}
	if (!clk->fine)
		clk->fine = bpf_ktime_get_ns();
	return clk->fine;
}

#endif
