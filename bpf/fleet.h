/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Fleet levels: a limit shared by many hosts through Redis. The packet path
 * never waits for the network. It enforces from its own state, and tells
 * the control plane which keys admitted packets; the control plane exchanges
 * their consumption with Redis every sync and folds the other hosts' into
 * the local state with xdpl_fleet_apply, a program it runs with
 * BPF_PROG_TEST_RUN so that the fold is atomic against the packet path.
 *
 * token_bucket: a key within its local share (the level's share of the
 * limit, xdpl_fleet_shares) is not exchanged at all: its state word b is a
 * bucket at the share's rate. A key that crosses it, or that the control
 * plane puts there (another host's key crossed), is in the exchange: b holds
 * the sync epoch and the units admitted since the control plane last took
 * them, and the first admission of the key in an epoch reports it. A level
 * without a share exchanges every key.
 * fixed_window: the admission that opens a key's window reports the key; the
 * control plane follows it until the window ends.
 */
#ifndef XDPLIMIT_FLEET_H
#define XDPLIMIT_FLEET_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "xdplimit_maps.h"
#include "atomics.h"
#include "counters.h"

/* A fleet fixed window's reserve: the units held back for the other hosts
 * when a window opens (xdpl_fixed_window in limiters.h). */
static __always_inline __u64 xdpl_window_reserve(struct xdpl_level *l)
{
	__u32 id = l->state_id;
	__u64 *r = bpf_map_lookup_elem(&xdpl_fleet_reserve, &id);

	return r ? *r : 0;
}

#define XDPL_FLEET_PENDING_MASK ((1ULL << XDPL_FLEET_EPOCH_SHIFT) - 1)

static __always_inline void xdpl_fleet_report(struct xdpl_level *l, struct xdpl_key *k)
{
	struct xdpl_key *e = bpf_ringbuf_reserve(&xdpl_fleet_keys, sizeof(*e), 0);

	if (!e) {
		xdpl_count(XDPL_C_FLEET_LOST, 0);
		return;
	}
	if (!k || l->key_kind == XDPL_KEY_GLOBAL) {
		__builtin_memset(e, 0, sizeof(*e));
		e->state_id = l->state_id;
	} else {
		*e = *k;
	}
	bpf_ringbuf_submit(e, 0);
}

#define XDPL_FLEET_HOT	      (1ULL << XDPL_FLEET_HOT_BIT)
#define XDPL_FLEET_EPOCH_MASK (((1ULL << XDPL_FLEET_EPOCH_BITS) - 1) << XDPL_FLEET_EPOCH_SHIFT)

/* The word b of a key in the exchange in this epoch. */
static __always_inline __u64 xdpl_fleet_epoch_bits(void)
{
	__u32 zero = 0;
	struct xdpl_fleet_sync *fc = bpf_map_lookup_elem(&xdpl_fleet_ctl, &zero);

	if (!fc)
		return 0;
	return XDPL_FLEET_HOT |
	       (((__u64)fc->epoch << XDPL_FLEET_EPOCH_SHIFT) & XDPL_FLEET_EPOCH_MASK);
}

/* A key in the exchange: its units are added to b, and its first
 * admission of the epoch reports it (whoever moves the epoch reports). A
 * word that held a share's tat (the level's share removed) starts from this
 * packet's units: its low bits are a time, not units. */
static __always_inline void xdpl_fleet_pending(struct xdpl_state *s, struct xdpl_level *l,
					       struct xdpl_key *k, __u64 cost)
{
	__u64 epoch = xdpl_fleet_epoch_bits();
	__u64 old = __sync_fetch_and_add(&s->b, cost);

	if (!epoch || (old & ~XDPL_FLEET_PENDING_MASK) == epoch)
		return;
	for (int i = 0; i < XDPL_CAS_TRIES; i++) {
		__u64 cur = XDPL_READ_ONCE(s->b);

		if ((cur & ~XDPL_FLEET_PENDING_MASK) == epoch)
			return;
		__u64 pend = (cur & XDPL_FLEET_HOT) ? cur & XDPL_FLEET_PENDING_MASK : cost;

		if (__sync_val_compare_and_swap(&s->b, cur, pend | epoch) == cur) {
			xdpl_fleet_report(l, k);
			return;
		}
	}
}

/* A key within its local share: b is a bucket at the share's rate (tat in
 * ns), charged like the level's own. While it runs at most tol ahead of
 * now the key costs the exchange nothing: no report, no pending units.
 * Crossing it puts the key in the exchange with the share's excess as its
 * pending units, and reports it. Returns 1 when that is done (within, or
 * crossed here), 0 when the key was in the exchange already. */
static __always_inline int xdpl_fleet_within(struct xdpl_state *s, struct xdpl_level *l,
					     struct xdpl_key *k, struct xdpl_fleet_share *sh,
					     __u64 now, __u64 cost)
{
	__u64 inc = (cost * sh->inc) >> XDPL_FP_SHIFT;

	for (int i = 0; i < XDPL_CAS_TRIES; i++) {
		__u64 cur = XDPL_READ_ONCE(s->b);

		if (cur & XDPL_FLEET_HOT)
			return 0;
		__u64 next = (cur > now ? cur : now) + inc;

		if (next - now <= sh->tol) {
			if (__sync_val_compare_and_swap(&s->b, cur, next) == cur)
				return 1;
			continue;
		}
		__u64 hot = xdpl_fleet_epoch_bits();

		if (!hot)
			return 1;
		if (__sync_val_compare_and_swap(&s->b, cur, hot | (sh->cross + cost)) == cur) {
			xdpl_fleet_report(l, k);
			return 1;
		}
	}
	return 1;
}

/* After a fleet level admitted a packet (ok: the algorithm's answer, 2 when
 * the packet opened a window). */
static __always_inline void xdpl_fleet_admitted(struct xdpl_state *s, struct xdpl_level *l,
						struct xdpl_key *k, __u64 now, __u64 cost, int ok)
{
	if (l->algorithm != XDPL_ALG_TOKEN_BUCKET) {
		if (ok == 2)
			xdpl_fleet_report(l, k);
		return;
	}
	if (!(XDPL_READ_ONCE(s->b) & XDPL_FLEET_HOT)) {
		__u32 slot = l->state_id & (XDPL_FLEET_SHARE_SLOTS - 1);
		struct xdpl_fleet_share *sh = bpf_map_lookup_elem(&xdpl_fleet_shares, &slot);

		if (sh && sh->state_id == l->state_id && sh->inc &&
		    xdpl_fleet_within(s, l, k, sh, now, cost))
			return;
	}
	xdpl_fleet_pending(s, l, k, cost);
}

#endif
