/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* xdpl_main's per-CPU scratch and the flow cache's slots (flows.h),
 * shared with Go through bpf2go. */
#ifndef XDPLIMIT_FLOW_STRUCTS_H
#define XDPLIMIT_FLOW_STRUCTS_H

#include <linux/types.h>
#include "xdplimit_consts.h"
#include "xdplimit_structs.h"

/* What xdpl_main read before the ban table, for xdpl_flow_note: an entry
 * learned from this packet is tagged with it (flows.h). */
struct xdpl_flow_tag {
	__u64 epoch; /* xdpl_ban_epoch_of the ban epoch; 0 without bans or fleet windows */
	__u32 seq;
	__u32 gen;
	__u32 repeat; /* xdpl_limit's: 1 + the level refused from the refused-until cache */
	__u32 pad;
};

/* xdpl_main's per-CPU scratch (why not on the stack: xdpl_main): the
 * packet as parsed, and the flow cache's tags (bpf/flows.h), one per slot,
 * which a probe reads before the slot: 4 KiB that a flood of forged
 * sources keeps in the cache, where the slots it would probe at random
 * (96 KiB) are not. */
struct xdpl_scratch {
	struct xdpl_pkt pkt;
	/* What xdpl_main read before the ban table, for xdpl_flow_note
	 * (flows.h): here rather than on its stack, which the call chains
	 * to the global functions fill to 6.1's 512 bytes. */
	struct xdpl_flow_tag tag;
	__u32 flow_tags[1 << XDPL_FLOW_BITS];
};

/* A slot of the per-CPU flow cache (bpf/flows.h): packets equal to sig
 * under the generation's sig_mask are refused by level `level` of rule rk
 * (the first, or the second behind a global one) at every time in
 * [from, until) of from's sketch mark epoch, while the generation (seq) and
 * the bans (epoch) are the ones seen then. */
struct xdpl_flow {
	struct xdpl_pkt sig;
	__u64 from;
	__u64 until;
	__u64 epoch; /* the ban epoch then (ban_epoch.h: xdpl_ban_epoch_of) */
	__u32 seq;
	__u32 rk;    /* the rule's key in xdpl_rules */
	__u16 slot;  /* the rule's counter slot */
	__u8 origin; /* the refusing level's origin */
	__u8 verdict;
	__u8 lflags; /* the refusing level's flags (its clock) */
	__u8 level;  /* the refusing level's index in the rule: 0 or 1 */
	__u8 pad[6];
};

#endif
