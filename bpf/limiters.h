/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The algorithms on state shared by all CPUs (sliding_log: slidelog.h). Each one decides from a
 * snapshot of its state word and commits with compare-and-swap, retrying when
 * another CPU got there first; the over-limit path only reads. That makes the
 * admitted count exact whichever CPUs a source's packets arrive on, without a
 * lock (an LRU map cannot hold one) and without bouncing the cache line of a
 * flooding source between CPUs.
 *
 * The Go reference models in model/ mirror this arithmetic operation for
 * operation; a test replays random traces through both and requires identical
 * verdicts. Change both together.
 *
 * With commit == 0 an algorithm only decides (reads, never writes): the
 * first of the two phases in which a rule's levels are evaluated.
 *
 * Return: 1 admit (2: admitted, and opened a fixed window), 0 over limit,
 * -1 still contended after XDPL_CAS_TRIES.
 */
#ifndef XDPLIMIT_LIMITERS_H
#define XDPLIMIT_LIMITERS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "xdplimit_structs.h"
#include "atomics.h"
#include "fleet.h"
#include "slidelog.h"

/* token_bucket as GCRA: one theoretical arrival time (tat) per source. A
 * packet is admitted if, after charging it, tat runs at most the tolerance
 * (burst * interval) ahead of now. max(tat, now) rather than now - tat:
 * another CPU may have read a later clock and stored a tat ahead of ours, and
 * an unsigned difference would wrap into a huge refill. */
static __always_inline int xdpl_token_bucket(struct xdpl_state *s, struct xdpl_level *l, __u64 now,
					     __u64 cost, int commit)
{
	__u64 t = now << XDPL_TIME_SHIFT;
	__u64 inc = (cost * l->p1) >> (XDPL_FP_SHIFT - XDPL_TIME_SHIFT);
	__u64 tau = l->p2;

	for (int i = 0; i < XDPL_CAS_TRIES; i++) {
		__u64 tat = XDPL_READ_ONCE(s->a);
		__u64 next = (tat > t ? tat : t) + inc;

		if (next - t > tau)
			return 0;
		if (!commit)
			return 1;
		if (__sync_val_compare_and_swap(&s->a, tat, next) == tat)
			return 1;
	}
	return -1;
}

/* fixed_window: at most limit units per aligned window (p3 shifts the
 * alignment: fleet levels align windows to the wall clock). The state word holds
 * the window's 24-bit sequence and its count; b holds the full index of the
 * window last opened, which tells a stale entry (idle for 2^24 windows) from
 * a current one with the same sequence bits. */
static __always_inline int xdpl_fixed_window(struct xdpl_state *s, struct xdpl_level *l, __u64 now,
					     __u64 cost, int commit)
{
	__u64 w = l->p1, limit = l->p2, t = now + l->p3;
	__u64 last = XDPL_READ_ONCE(s->b);
	/* Mostly the packet's window is the one last opened: its index then
	 * follows without a division (b only ever holds an index of t / w,
	 * so last * w does not wrap). */
	__u64 idx = t - last * w < w ? last : t / w;

	if (cost > limit)
		return 0;
	for (int i = 0; i < XDPL_CAS_TRIES; i++) {
		__u64 old = XDPL_READ_ONCE(s->a);
		__u64 opened = XDPL_READ_ONCE(s->b);
		__u64 seq = idx & XDPL_WIN_SEQ_MASK;
		__u64 d = (seq - xdpl_win_seq(old)) & XDPL_WIN_SEQ_MASK;
		__u64 cnt = 0;
		int open = 0;

		if ((__s64)(idx - opened) >= (1LL << (XDPL_WIN_SEQ_BITS - 1))) {
			open = 1; /* stale: a new window */
		} else if (d == 0) {
			cnt = xdpl_win_count(old);
		} else if (d > (XDPL_WIN_SEQ_MASK >> 1)) {
			/* Another CPU's later clock already opened the next
			 * window: count this packet in it. */
			seq = xdpl_win_seq(old);
			cnt = xdpl_win_count(old);
		} else {
			open = 1;
		}
		/* A fleet level opens its window with the other hosts' share
		 * reserved, until the first sync says what they used
		 * (fleet.h). */
		if (open && (l->flags & XDPL_LF_FLEET))
			cnt = xdpl_window_reserve(l);
		if (cnt + cost > limit)
			return 0;
		if (!commit)
			return 1;
		if (__sync_val_compare_and_swap(
			&s->a, old, (seq << XDPL_WIN_COUNT_BITS) | (cnt + cost)) == old) {
			if (open) {
				XDPL_WRITE_ONCE(s->b, idx);
				return 2; /* opened the window (fleet levels report it) */
			}
			return 1;
		}
	}
	return -1;
}

_Static_assert(XDPL_WIN_COUNT_BITS + XDPL_SW_TIME_BITS <= 64,
	       "a sliding window's count times its time must fit 64 bits");

/* sliding_window: the weighted two-window counter. The estimate is the
 * current window's count plus the previous window's count times the share of
 * the previous window still inside the sliding window, rounded down. a and b
 * hold the even and odd windows; the current one is updated by CAS, the
 * previous one only read.
 *
 * The share is reckoned in units of 2^p3 ns (p3: the window's time shift,
 * below 2^XDPL_SW_TIME_BITS units a window), and compared without a
 * division: est = pcnt * left / wq rounded down exceeds room exactly when
 * pcnt * left >= (room + 1) * wq; counts below 2^40 keep both products in
 * 64 bits. */
static __always_inline int xdpl_sliding_window(struct xdpl_state *s, struct xdpl_level *l,
					       __u64 now, __u64 cost, int commit)
{
	__u64 w = l->p1, limit = l->p2, sh = l->p3 & 63;
	__u64 idx = now / w;
	__u64 el = now - idx * w;

	if (cost > limit)
		return 0;
	/* A later clock on another CPU may have opened the next window. */
	__u64 other = XDPL_READ_ONCE(*((idx & 1) ? &s->a : &s->b));

	if (xdpl_win_seq(other) == ((idx + 1) & XDPL_WIN_SEQ_MASK)) {
		idx++;
		el = 0;
	}
	__u64 seq = idx & XDPL_WIN_SEQ_MASK;
	__u64 *cur = (idx & 1) ? &s->b : &s->a;
	__u64 pw = XDPL_READ_ONCE(*((idx & 1) ? &s->a : &s->b));
	__u64 pcnt = xdpl_win_seq(pw) == ((idx - 1) & XDPL_WIN_SEQ_MASK) ? xdpl_win_count(pw) : 0;
	__u64 prev = pcnt * ((w - el) >> sh), wq = w >> sh;

	for (int i = 0; i < XDPL_CAS_TRIES; i++) {
		__u64 cw = XDPL_READ_ONCE(*cur);
		__u64 ccnt = xdpl_win_seq(cw) == seq ? xdpl_win_count(cw) : 0;

		if (ccnt + cost > limit || prev >= (limit - ccnt - cost + 1) * wq)
			return 0;
		if (!commit)
			return 1;
		if (__sync_val_compare_and_swap(cur, cw,
						(seq << XDPL_WIN_COUNT_BITS) | (ccnt + cost)) == cw)
			return 1;
	}
	return -1;
}

/* Inlined into each level function (xdpl_check_level, xdpl_commit_level,
 * xdpl_single_level), which are global functions the verifier checks once
 * each: the algorithms are walked once per level function, not once per
 * path through the rule's levels. It was a global function of its own; the
 * call and its return cost a known source 5-10 ns and a rule with a global
 * aggregate 18-35 ns (the return is dear on CPUs with the SRSO
 * mitigation). */
static __always_inline int xdpl_apply(struct xdpl_state *s, struct xdpl_level *l, __u64 now,
				      __u64 cost, int commit)
{
	if (!s || !l)
		return 0;
	switch (l->algorithm) {
	case XDPL_ALG_TOKEN_BUCKET:
		return xdpl_token_bucket(s, l, now, cost, commit);
	case XDPL_ALG_FIXED_WINDOW:
		return xdpl_fixed_window(s, l, now, cost, commit);
	case XDPL_ALG_SLIDING_WINDOW:
		return xdpl_sliding_window(s, l, now, cost, commit);
	case XDPL_ALG_SLIDING_LOG:
		/* Packets only; the policy refuses anything else. */
		return xdpl_sliding_log(s, l, now, cost, commit);
	}
	return 0;
}

#endif
