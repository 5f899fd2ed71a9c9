/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The limiter's clock. bpf_ktime_get_ns costs ~35 ns here, a third of a
 * packet's budget; the coarse clock costs next to nothing but only advances
 * once per scheduler tick. The control plane marks the levels whose burst or
 * window is too short for the tick (XDPL_LF_FINE_CLOCK); only those read the
 * fine clock. Tests and pcap replay inject time through xdpl_clock. */
#ifndef XDPLIMIT_CLOCK_H
#define XDPLIMIT_CLOCK_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "xdplimit_maps.h"

/* Set by the loader before load; the verifier prunes the other branches. */
volatile const __u32 xdpl_clock_mode = XDPL_CLOCK_KTIME;

/* The coarse clock is jiffies in ns: the verifier inlines bpf_jiffies64 as a
 * load, where bpf_ktime_get_coarse_ns is a helper that calls two more kernel
 * functions (measured: 20 ns a packet on the development VM, whose CPU pays
 * for every return under its return-stack mitigation). The tick in ns, set
 * by the loader (clock_getres of CLOCK_MONOTONIC_COARSE: the kernel's
 * TICK_NSEC, by which it advances jiffies). */
volatile const __u64 xdpl_tick_ns = 4000000;
/* jiffies * tick + this offset is CLOCK_MONOTONIC to within a tick, as
 * bpf_ktime_get_coarse_ns is, so coarse and fine readings stay comparable
 * (the sketch's epochs are shared by levels on either clock; pinned state
 * outlives a load). The first packet after each load measures it; CPUs
 * racing to do so differ by at most a tick. 0 means not measured yet. */
__u64 xdpl_coarse_off = 0;

static __always_inline __u64 xdpl_coarse_ns(void)
{
	__u64 t = bpf_jiffies64() * xdpl_tick_ns;
	__u64 off = xdpl_coarse_off;

	if (!off) {
		off = bpf_ktime_get_coarse_ns() - t;
		xdpl_coarse_off = off;
	}
	return t + off;
}

/* Each clock is read at most once per packet: the coarse one when the
 * packet's clock starts (xdpl_clk_start), the fine one when a level first
 * asks for it. Reading the coarse one lazily too multiplied the states the
 * verifier walks through every level (coarse mode: 912k -> 811k of its 1M
 * instructions; reading the fine one eagerly as well made it 966k). */
struct xdpl_clk {
	__u64 coarse;
	__u64 fine;
};

static __always_inline void xdpl_clk_start(struct xdpl_clk *clk)
{
	clk->fine = 0;
	clk->coarse = xdpl_clock_mode == XDPL_CLOCK_COARSE ? xdpl_coarse_ns() : 0;
}

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
	if (xdpl_clock_mode == XDPL_CLOCK_COARSE && !(level_flags & XDPL_LF_FINE_CLOCK))
		return clk->coarse;
	if (!clk->fine)
		clk->fine = bpf_ktime_get_ns();
	return clk->fine;
}

#endif
