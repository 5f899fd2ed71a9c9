/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The per-CPU "refused until" cache. When a level refuses a key from its
 * state entry, the earliest time at which that entry could admit the key's
 * next packet follows from the state (GCRA: tat + T - tau; a fixed window:
 * its end; a sliding window: when the previous window's weight has decayed
 * enough). Until then the key's packets are refused here, from one slot of
 * a small direct-mapped per-CPU array, without the sketch, the state table
 * or the algorithm, and without touching any line another CPU writes.
 *
 * Exact, not an estimate: the state of a key only moves towards refusing
 * (tat and window counts grow as other CPUs admit), so a packet the state
 * refused at time t stays refused until the computed time. A reload that
 * changes a level's limit gives it a new state_id, which is part of the
 * tag: the old entries no longer match. Byte-counting levels (the cost
 * varies per packet) are not cached. A fleet fixed window's count is the
 * exception to "only moves towards refusing": the first sync of a window
 * replaces the reserve it opened with by what the other hosts used, which
 * may be less. Its entries are stamped with the ban epoch, which such a
 * sync moves after lowering the count, and hold only while it stays put.
 *
 * The admission sketch: a hit skips the key's sketch marks, which only a
 * lookup refreshes. An entry is therefore used only within the mark epoch
 * in which it was written (by a packet that found the key's entry, and so
 * marked it): within that epoch the lookup would not have written the
 * marks either, and the first packet of the next epoch takes the full path
 * and marks them as it always did. A noted entry also flags the key's mark
 * cells for that epoch (sketch.h), and a key whose cells are not all
 * flagged is not probed: an admitted known source pays no probe. */
#ifndef XDPLIMIT_REFUSED_H
#define XDPLIMIT_REFUSED_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "xdplimit_maps.h"
#include "atomics.h"
#include "ban_epoch.h"
#include "counters.h"
#include "sketch.h"

/* 0 turns the cache off (benchmarks compare both in one run). */
volatile const __u32 xdpl_refused_on = 1;

static __always_inline int xdpl_refused_applies(struct xdpl_level *l)
{
	return xdpl_refused_on && !(l->flags & XDPL_LF_BYTES);
}

/* Whether level l's entries hold only under the ban epoch they were noted
 * in: a fleet fixed window (a fleet token bucket's sync only moves tat
 * later, bpf/fleet_apply.bpf.c). */
static __always_inline int xdpl_refused_stamped(struct xdpl_level *l)
{
	return (l->flags & XDPL_LF_FLEET) && l->algorithm != XDPL_ALG_TOKEN_BUCKET;
}

/* The key's slot: a multiplicative hash of the key's words. A collision
 * only replaces an entry (a lost hit, never a wrong verdict). */
static __always_inline struct xdpl_refused *xdpl_refused_slot(struct xdpl_key *k)
{
	__u64 h = ((__u64)k->state_id << 32 | (__u64)k->port << 8 | k->family) ^ k->addr[0] ^
		  ((__u64)(k->addr[1] ^ k->addr[3]) << 32) ^ k->addr[2];
	__u32 idx = (h * 0x9e3779b97f4a7c15ULL) >> (64 - XDPL_REFUSED_BITS);

	return bpf_map_lookup_elem(&xdpl_refused, &idx);
}

static __always_inline int xdpl_key_eq(struct xdpl_key *a, struct xdpl_key *b)
{
	return a->state_id == b->state_id && a->port == b->port && a->family == b->family &&
	       a->addr[0] == b->addr[0] && a->addr[1] == b->addr[1] && a->addr[2] == b->addr[2] &&
	       a->addr[3] == b->addr[3];
}

/* Whether key k (level l) is refused at now by an entry of this CPU's
 * cache; counted. */
static __always_inline int xdpl_refused_hit(struct xdpl_level *l, struct xdpl_key *k, __u64 now)
{
	if (!xdpl_refused_applies(l))
		return 0;
	struct xdpl_refused *e = xdpl_refused_slot(k);

	if (!e || now >= e->until || now < e->from ||
	    (now >> XDPL_SKETCH_MARK_SHIFT) != (e->from >> XDPL_SKETCH_MARK_SHIFT) ||
	    !xdpl_key_eq(&e->key, k))
		return 0;
	if (xdpl_refused_stamped(l)) {
		struct xdpl_ban_epoch *ep = xdpl_ban_epoch_ptr();

		if (!ep || e->stamp != xdpl_ban_epoch_of(ep))
			return 0;
	}
	xdpl_count(XDPL_C_REFUSED_CACHED, 0);
	return 1;
}

/* The earliest time (ns) at which state s could admit a packet of cost 1
 * at level l, if it refuses one at now; 0 if it does not refuse it (or the
 * state is in a case not worth the arithmetic). Re-reads the state: it may
 * have moved on since the algorithm's decision, and only ever towards
 * refusing for longer. Mirrors the algorithms in limiters.h. */
static __always_inline __u64 xdpl_refused_until(struct xdpl_state *s, struct xdpl_level *l,
						__u64 now)
{
	switch (l->algorithm) {
	case XDPL_ALG_TOKEN_BUCKET: {
		/* Refused at t' while max(tat, t') + inc - t' > tau: for every
		 * t' < tat + inc - tau (and for all t' when inc > tau). */
		__u64 t = now << XDPL_TIME_SHIFT;
		__u64 inc = l->p1 >> (XDPL_FP_SHIFT - XDPL_TIME_SHIFT);
		__u64 tat = XDPL_READ_ONCE(s->a);
		__u64 next = (tat > t ? tat : t) + inc;

		if (next - t <= l->p2)
			return 0;
		/* t' = now' << TIME_SHIFT < next - tau  <=>  now' < ceil(...) */
		return (next - l->p2 + (1 << XDPL_TIME_SHIFT) - 1) >> XDPL_TIME_SHIFT;
	}
	case XDPL_ALG_FIXED_WINDOW: {
		__u64 w = l->p1, limit = l->p2;
		__u64 idx = (now + l->p3) / w;
		__u64 old = XDPL_READ_ONCE(s->a);
		__u64 opened = XDPL_READ_ONCE(s->b);

		/* Only a full window of this CPU's own clock: the rest of it
		 * is refused. */
		if ((__s64)(idx - opened) >= (1LL << (XDPL_WIN_SEQ_BITS - 1)) ||
		    xdpl_win_seq(old) != (idx & XDPL_WIN_SEQ_MASK) ||
		    xdpl_win_count(old) + 1 <= limit)
			return 0;
		return (idx + 1) * w - l->p3;
	}
	case XDPL_ALG_SLIDING_WINDOW: {
		__u64 w = l->p1, limit = l->p2, sh = l->p3 & 63;
		__u64 idx = now / w;
		__u64 el = now - idx * w;
		__u64 other = XDPL_READ_ONCE(*((idx & 1) ? &s->a : &s->b));

		if (xdpl_win_seq(other) == ((idx + 1) & XDPL_WIN_SEQ_MASK))
			return 0; /* another CPU's clock is in the next window */
		__u64 seq = idx & XDPL_WIN_SEQ_MASK;
		__u64 pcnt = xdpl_win_seq(other) == ((idx - 1) & XDPL_WIN_SEQ_MASK)
				 ? xdpl_win_count(other)
				 : 0;
		__u64 cw = XDPL_READ_ONCE(*((idx & 1) ? &s->b : &s->a));
		__u64 ccnt = xdpl_win_seq(cw) == seq ? xdpl_win_count(cw) : 0;
		__u64 wq = w >> sh;

		if (ccnt + 1 > limit)
			return (idx + 1) * w; /* full on its own until the window ends */
		/* Refused while pcnt * left >= (limit - ccnt) * wq (limiters.h),
		 * left = (w - el) >> sh: admitted again once left <= lmax =
		 * ((limit - ccnt) * wq - 1) / pcnt (below left now; pcnt is not
		 * 0 then), that is once el' >= w + 1 - ((lmax + 1) << sh). */
		__u64 need = (limit - ccnt) * wq;

		if (pcnt * ((w - el) >> sh) < need)
			return 0;
		__u64 lmax = (need - 1) / pcnt;

		return idx * w + w + 1 - ((lmax + 1) << sh);
	}
	}
	return 0;
}

/* After level l refused key k from its state entry s at now (the entry was
 * found by a lookup, which marked the key in the sketch): remembers until
 * when it stays refused.
 *
 * A global function, verified once on its own: inlined at each of the four
 * levels' refusals, its per-algorithm arithmetic multiplied the states the
 * verifier walks past its 1M-instruction limit. Called only on a refusal
 * the cache did not answer, so its call costs the hit path nothing. */
__attribute__((noinline)) int xdpl_refused_note(struct xdpl_state *s, struct xdpl_level *l,
						struct xdpl_key *k, __u64 now)
{
	if (!s || !l || !k || !xdpl_refused_applies(l))
		return 0;
	__u64 stamp = 0;

	if (xdpl_refused_stamped(l)) {
		struct xdpl_ban_epoch *ep = xdpl_ban_epoch_ptr();

		if (!ep)
			return 0;
		/* Read before the state (an atomic orders it on every
		 * architecture): a sync lowering the count after the state is
		 * read moves the epoch after that too, and voids this entry. */
		__u64 dp = __sync_fetch_and_add(&ep->datapath, 0);

		stamp = xdpl_ban_epoch_word(dp, XDPL_READ_ONCE(ep->control));
	}
	__u64 until = xdpl_refused_until(s, l, now);

	if (until <= now)
		return 0;
	struct xdpl_refused *e = xdpl_refused_slot(k);

	if (!e)
		return 0;
	e->key = *k;
	e->from = now;
	e->until = until;
	e->stamp = stamp;
	/* The key's cells are found again here rather than kept by the
	 * caller across the algorithm's calls, which took xdpl_main's frame
	 * past what 6.1 allows a chain of calls. The lookup that found s
	 * marked them in this mark epoch. */
	struct xdpl_sketch sk;

	xdpl_sketch_find(l, xdpl_key_hash(k), &sk, now);
	if (sk.flags & XDPL_SK_ON)
		xdpl_sketch_flag_refused(&sk);
	return 0;
}

#endif
