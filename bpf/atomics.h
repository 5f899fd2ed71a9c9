/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The state words other CPUs write: how they are read and written once,
 * and how a window's word packs its sequence and count. The algorithms
 * (limiters.h, slidelog.h), the refused-until cache (refused.h) and the
 * fleet programs (fleet.h, the apply program) share them. */
#ifndef XDPLIMIT_ATOMICS_H
#define XDPLIMIT_ATOMICS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "xdplimit_consts.h"

/* One load or store of the whole word, never split, merged or repeated by
 * the compiler: other CPUs update it with compare-and-swap meanwhile. */
#define XDPL_READ_ONCE(x)     (*(volatile __u64 *)&(x))
#define XDPL_WRITE_ONCE(x, v) (*(volatile __u64 *)&(x) = (v))

/* Counts of one window packed with the low bits of the window's index. */
static __always_inline __u64 xdpl_win_seq(__u64 word)
{
	return word >> XDPL_WIN_COUNT_BITS;
}

static __always_inline __u64 xdpl_win_count(__u64 word)
{
	return word & XDPL_WIN_COUNT_MASK;
}

#endif
