/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Frames the parser cannot judge (parsing.h): counted by kind and given the
 * policy's unparsed action, optionally under one global limit, so that a
 * flood of garbage frames can be capped like any other. They are never
 * charged to a rule: a spoofer cannot spend a victim's budget with frames the
 * stack would drop. */
#ifndef XDPLIMIT_UNPARSED_H
#define XDPLIMIT_UNPARSED_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "xdplimit_structs.h"
#include "xdplimit_maps.h"
#include "counters.h"
#include "clock.h"
#include "limiters.h"

/* The verdict (XDPL_V_*) for a frame the parser gave up on: the policy's
 * unparsed action, then its limit; shadow mode turns a drop into SHADOW. */
static __always_inline __u32 xdpl_unparsed(struct xdpl_pkt *p)
{
	__u32 zero = 0;
	__u32 verdict = XDPL_V_PASS;
	struct xdpl_control *ctl = bpf_map_lookup_elem(&xdpl_ctl, &zero);
	__u32 kind = p->unparsed - 1;

	if (ctl) {
		/* The generation's flags are read before its index goes to the
		 * stack as a lookup key: 6.1's verifier loses the bound of a
		 * 32-bit value reloaded from the stack. */
		__u32 gen = ctl->active & 1;
		__u32 shadow = ctl->gen[gen].flags & XDPL_GF_SHADOW;
		struct xdpl_unparsed_cfg *cfg = bpf_map_lookup_elem(&xdpl_unparsed_cfgs, &gen);

		if (cfg && cfg->action == XDPL_V_DROP) {
			verdict = XDPL_V_DROP;
		} else if (cfg && cfg->limited) {
			struct xdpl_state *s = bpf_map_lookup_elem(&xdpl_unparsed_state, &zero);
			struct xdpl_level *l = &cfg->level;
			struct xdpl_clk clk;

			xdpl_clk_start(&clk);
			__u64 cost = (l->flags & XDPL_LF_BYTES) ? p->len : 1;

			if (!s || xdpl_apply(s, l, xdpl_now(&clk, l->flags), cost, 1) <= 0)
				verdict = XDPL_V_DROP;
		}
		if (verdict == XDPL_V_DROP && shadow)
			verdict = XDPL_V_SHADOW;
	}
	if (kind < XDPL_UP_KINDS)
		xdpl_unparsed_count(kind, p, verdict == XDPL_V_DROP);
	return verdict;
}

#endif
