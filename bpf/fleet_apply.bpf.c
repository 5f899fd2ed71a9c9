// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/* xdpl_fleet_apply: the control plane's side of fleet levels (fleet.h).
 * It runs this program with BPF_PROG_TEST_RUN over a batch of entries in
 * xdpl_fleet_batch, to take what the packet path admitted and to fold in
 * what other hosts admitted with the same compare-and-swap discipline as
 * the packet path: a write from user space would replace a whole value and
 * lose the admissions made meanwhile. Never attached. Its own object
 * (gen.LoadFleetApply), loaded onto the maps of the limiter's (maps/fleet.go):
 * it shares xdplimit_maps.h with xdplimit.bpf.c, so it names the same maps. */

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "xdplimit_consts.h"
#include "xdplimit_structs.h"
#include "xdplimit_maps.h"
#include "atomics.h"
#include "ban_epoch.h"
#include "fleet.h"
#include "state.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

static __always_inline struct xdpl_state *xdpl_fleet_state(struct xdpl_fleet_op *op)
{
	if (op->flags & XDPL_FOP_GLOBAL) {
		__u32 slot = op->slot;

		return bpf_map_lookup_elem(&xdpl_globals, &slot);
	}
	return xdpl_lookup(&op->key);
}

/* The units a key in the exchange admitted since the last take; none for
 * a key within its share (its b is a time). */
static __always_inline __u64 xdpl_fleet_pend(__u64 b)
{
	return (b & XDPL_FLEET_HOT) ? b & XDPL_FLEET_PENDING_MASK : 0;
}

/* token_bucket: takes the units admitted since the last take (the epoch
 * bits stay). XDPL_FLEET_COOL also puts the key back within its share, its
 * share's bucket full. */
static __always_inline void xdpl_fleet_take(struct xdpl_state *s, struct xdpl_fleet_op *op)
{
	for (int i = 0; i < XDPL_CAS_TRIES; i++) {
		__u64 cur = XDPL_READ_ONCE(s->b);
		__u64 next = 0;

		if (op->op == XDPL_FLEET_TAKE)
			next = (cur & XDPL_FLEET_HOT) ? cur & ~XDPL_FLEET_PENDING_MASK : cur;
		if (__sync_val_compare_and_swap(&s->b, cur, next) == cur) {
			op->out0 = xdpl_fleet_pend(cur);
			op->out1 = XDPL_READ_ONCE(s->a);
			op->flags |= XDPL_FOP_DONE;
			return;
		}
	}
}

/* token_bucket: the fleet's tat, as of the take: arg0 (time units), plus
 * what this host admitted since (its pending units times arg1, the
 * emission interval per unit in time units). tat only moves later. */
static __always_inline void xdpl_fleet_fold_tat(struct xdpl_state *s, struct xdpl_fleet_op *op)
{
	for (int i = 0; i < XDPL_CAS_TRIES; i++) {
		__u64 tat = XDPL_READ_ONCE(s->a);
		__u64 pend = xdpl_fleet_pend(XDPL_READ_ONCE(s->b));
		__u64 target = op->arg0 + pend * op->arg1;

		op->out1 = tat;
		if (target <= tat) {
			op->flags |= XDPL_FOP_DONE;
			return;
		}
		if (__sync_val_compare_and_swap(&s->a, tat, target) == tat) {
			op->out0 = target - tat;
			op->flags |= XDPL_FOP_DONE;
			return;
		}
	}
}

/* token_bucket: the key takes part in the exchange (another host's key
 * crossed its share): its next admission reports it (epoch 0 is never in
 * force). out0: 1 when it was within its share. */
static __always_inline void xdpl_fleet_heat(struct xdpl_state *s, struct xdpl_fleet_op *op)
{
	for (int i = 0; i < XDPL_CAS_TRIES; i++) {
		__u64 cur = XDPL_READ_ONCE(s->b);

		if (cur & XDPL_FLEET_HOT) {
			op->flags |= XDPL_FOP_DONE;
			return;
		}
		if (__sync_val_compare_and_swap(&s->b, cur, XDPL_FLEET_HOT) == cur) {
			op->out0 = 1;
			op->flags |= XDPL_FOP_DONE;
			return;
		}
	}
}

/* fixed_window: reads the window word (out0) and the opened index (out1). */
static __always_inline void xdpl_fleet_read(struct xdpl_state *s, struct xdpl_fleet_op *op)
{
	op->out0 = XDPL_READ_ONCE(s->a);
	op->out1 = XDPL_READ_ONCE(s->b);
	op->flags |= XDPL_FOP_DONE;
}

/* fixed_window: adds arg1 units (signed: the first sync of a window
 * replaces the reserve with what the other hosts used, which may be less)
 * to the window whose sequence is arg0, if it is still the key's window. */
static __always_inline void xdpl_fleet_add(struct xdpl_state *s, struct xdpl_fleet_op *op)
{
	for (int i = 0; i < XDPL_CAS_TRIES; i++) {
		__u64 cur = XDPL_READ_ONCE(s->a);

		op->out0 = cur;
		if (xdpl_win_seq(cur) != (op->arg0 & XDPL_WIN_SEQ_MASK)) {
			op->flags |= XDPL_FOP_DONE | XDPL_FOP_STALE;
			return;
		}
		__s64 cnt = (__s64)xdpl_win_count(cur) + (__s64)op->arg1;

		if (cnt < 0)
			cnt = 0;
		if (cnt > (__s64)XDPL_WIN_COUNT_MASK)
			cnt = XDPL_WIN_COUNT_MASK;
		if (__sync_val_compare_and_swap(&s->a, cur, (cur & ~XDPL_WIN_COUNT_MASK) | cnt) ==
		    cur) {
			/* Lowered: refusals cached before are void (refused.h,
			 * ban_epoch.h). */
			if ((__u64)cnt < xdpl_win_count(cur))
				xdpl_ban_epoch_move();
			op->flags |= XDPL_FOP_DONE;
			return;
		}
	}
}

static long xdpl_fleet_one(__u32 i, void *ctx)
{
	struct xdpl_fleet_op *op = bpf_map_lookup_elem(&xdpl_fleet_batch, &i);

	if (!op)
		return 1;
	op->out0 = 0;
	op->out1 = 0;
	op->flags &= ~(XDPL_FOP_DONE | XDPL_FOP_MISSING | XDPL_FOP_STALE);
	struct xdpl_state *s = xdpl_fleet_state(op);

	if (!s) {
		op->flags |= XDPL_FOP_MISSING;
		return 0;
	}
	switch (op->op) {
	case XDPL_FLEET_TAKE:
	case XDPL_FLEET_COOL:
		xdpl_fleet_take(s, op);
		break;
	case XDPL_FLEET_HEAT:
		xdpl_fleet_heat(s, op);
		break;
	case XDPL_FLEET_FOLD_TAT:
		xdpl_fleet_fold_tat(s, op);
		break;
	case XDPL_FLEET_READ:
		xdpl_fleet_read(s, op);
		break;
	case XDPL_FLEET_ADD:
		xdpl_fleet_add(s, op);
		break;
	}
	return 0;
}

/* Run by the control plane with BPF_PROG_TEST_RUN, never attached: the
 * "packet" is a struct xdpl_fleet_run saying how many batch entries to do.
 * Returns XDP_PASS when it did them, XDP_ABORTED on a bad request. */
SEC("xdp")
int xdpl_fleet_apply(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct xdpl_fleet_run *run = data;

	if ((void *)(run + 1) > data_end)
		return XDP_ABORTED;
	__u32 n = run->n;

	if (n > XDPL_FLEET_BATCH)
		return XDP_ABORTED;
	bpf_loop(n, xdpl_fleet_one, NULL, 0);
	return XDP_PASS;
}
