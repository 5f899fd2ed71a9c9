/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The ban epoch: one word that every ban added, and every fleet sync that
 * lowers a window's count, moves. What a CPU cached under an older word
 * (the flow cache's entries, a fleet window's refused-until entries) no
 * longer holds: those changes answer before, or against, what was
 * cached. */
#ifndef XDPLIMIT_BAN_EPOCH_H
#define XDPLIMIT_BAN_EPOCH_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "xdplimit_maps.h"

/* The ban epoch in one word: distinct for every datapath count under one
 * control value (an odd multiplier is a bijection), and a fresh random
 * control value gives a fresh word. */
static __always_inline __u64 xdpl_ban_epoch_word(__u64 datapath, __u64 control)
{
	return datapath * 0x9e3779b97f4a7c15ULL ^ control;
}

static __always_inline __u64 xdpl_ban_epoch_of(struct xdpl_ban_epoch *e)
{
	return xdpl_ban_epoch_word(e->datapath, e->control);
}

static __always_inline struct xdpl_ban_epoch *xdpl_ban_epoch_ptr(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&xdpl_ban_epoch, &zero);
}

/* Moves the ban epoch: every CPU's cached refusals learned before are void.
 * Called after the change they must not outlive is in place. */
static __always_inline void xdpl_ban_epoch_move(void)
{
	struct xdpl_ban_epoch *ep = xdpl_ban_epoch_ptr();

	if (ep)
		__sync_fetch_and_add(&ep->datapath, 1);
}

#endif
