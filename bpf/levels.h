/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* A rule's limiter levels: a key's state entry found behind the admission
 * sketch, a level decided and charged, and the two-phase evaluation of a
 * rule's levels. */
#ifndef XDPLIMIT_LEVELS_H
#define XDPLIMIT_LEVELS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "xdplimit_maps.h"
#include "parsing_defs.h"
#include "state.h"
#include "clock.h"
#include "limiters.h"
#include "counters.h"
#include "sketch.h"
#include "fleet.h"
#include "refused.h"

/* Charges a packet to the state entry of key k (NULL for a global level);
 * 1 when admitted. A fleet level's admissions are noted for the sync. */
static __always_inline int xdpl_charge(struct xdpl_state *s, struct xdpl_level *l, __u64 now,
				       __u64 cost, struct xdpl_key *k)
{
	int ok = xdpl_apply(s, l, now, cost, 1);

	if (ok < 0)
		xdpl_count(XDPL_C_CAS_EXHAUSTED, 0);
	if (ok > 0 && (l->flags & XDPL_LF_FLEET))
		xdpl_fleet_admitted(s, l, k, now, cost, ok);
	return ok > 0;
}

/* The key's state entry, looked up only when the sketch allows that it has
 * one (its cells are marked); a hit keeps the cells marked. A tracked key
 * that paused for over a mark epoch on this CPU is not looked up: its next
 * packet is counted in the sketch like a new key's (xdpl_miss), and found
 * once the count reaches track_after (xdpl_find_late). */
static __always_inline struct xdpl_state *xdpl_find(struct xdpl_key *k, struct xdpl_sketch *sk,
						    __u64 now)
{
	if ((sk->flags & (XDPL_SK_ON | XDPL_SK_MARKED)) == XDPL_SK_ON)
		return NULL;
	struct xdpl_state *s = xdpl_lookup_hashed(k, sk->set);

	if (!s)
		sk->flags |= XDPL_SK_LOOKED;
	else if (sk->flags & XDPL_SK_ON)
		xdpl_sketch_mark(sk, now);
	return s;
}

/* For a key that xdpl_find did not look up and that the sketch now counts
 * as heavy: looks it up after all, before anything inserts it (an insert
 * into a full LRU table evicts even when the key turns out to be there). */
static __always_inline struct xdpl_state *xdpl_find_late(struct xdpl_key *k, struct xdpl_sketch *sk,
							 __u64 now)
{
	if (sk->flags & XDPL_SK_LOOKED)
		return NULL;
	struct xdpl_state *s = xdpl_lookup_hashed(k, sk->set);

	if (s)
		xdpl_sketch_mark(sk, now);
	return s;
}

/* Whether key k (level l) is refused at now from the refused-until cache:
 * probed only when the sketch does not apply or flags a refusal in the
 * key's cells (sketch.h), which a noted entry sets (xdpl_refused_note). */
static __always_inline int xdpl_refused_key(struct xdpl_level *l, struct xdpl_key *k,
					    struct xdpl_sketch *sk, __u64 now)
{
	if ((sk->flags & (XDPL_SK_ON | XDPL_SK_REFUSED)) == XDPL_SK_ON)
		return 0;
	return xdpl_refused_hit(l, k, now);
}

/* xdpl_limit's *repeat when its rule's first level is global and refused
 * from the refused-until cache (the flow cache copies such a refusal under
 * a key without the source, flows.h); 1 and 2 are per-key levels'. */
#define XDPL_REPEAT_GLOBAL 3

/* A global level: refused from this CPU's refused-until cache, or decided
 * on its one entry g (commit 0: phase one, which only reads; 1: decided and
 * charged). 1 when admitted. A refusal is remembered in the cache; one
 * that came from it sets *repeat to XDPL_REPEAT_GLOBAL. */
static __always_inline int xdpl_global_level(struct xdpl_state *g, struct xdpl_level *l,
					     struct xdpl_pkt *p, __u64 now, __u64 cost, int commit,
					     __u32 *repeat)
{
	struct xdpl_key k;

	xdpl_key_of(l, p, &k);
	if (xdpl_refused_hit(l, &k, now)) {
		*repeat = XDPL_REPEAT_GLOBAL;
		return 0;
	}
	int ok = commit ? xdpl_charge(g, l, now, cost, NULL) : xdpl_apply(g, l, now, cost, 0) > 0;

	if (!ok)
		xdpl_refused_note(g, l, &k, now);
	return ok;
}

/* xdpl_check_level's answer for an admitting level without a state entry
 * that the sketch did not count (the sketch off for the level). */
#define XDPL_NO_ENTRY 0x10000

/* Decides for a key without a state entry: -1 when even a fresh bucket
 * refuses the packet; else the sketch's count for the key (this packet
 * included), or XDPL_NO_ENTRY where the sketch does not apply. */
static __always_inline int xdpl_miss(struct xdpl_level *l, struct xdpl_sketch *sk, __u64 now,
				     __u64 cost)
{
	struct xdpl_state fresh = {};

	if (xdpl_apply(&fresh, l, now, cost, 0) <= 0)
		return -1;
	if (sk->flags & XDPL_SK_ON)
		return xdpl_sketch_count(sk, now);
	return XDPL_NO_ENTRY;
}

/* Whether a key without an entry is admitted without one: the sketch has
 * seen it fewer than track_after times (seen: xdpl_miss's answer). The
 * packets the sketch let through before are not charged to the entry it
 * gets later: count-min overestimates on collisions, and charging its
 * estimate would refuse a new source's first packet. */
static __always_inline int xdpl_untracked(__u32 seen, struct xdpl_pkt *p)
{
	if (seen == 0 || seen == XDPL_NO_ENTRY || seen >= xdpl_track_after)
		return 0;
	xdpl_count(XDPL_C_UNTRACKED, p->len);
	return 1;
}

/* The start every level path shares. It declares cost, the packet's cost at
 * level l, and returns from the caller in two cases: refuse when l or p is
 * missing (which the verifier wants ruled out), and for a global level the
 * caller's answer on_global, an expression of g (the level's one entry, NULL
 * when its slot is out of range) and cost. A macro because it returns from
 * the caller; an inline helper with an answer code compiled to different
 * instructions (its inlined locals moved on the stack). */
#define XDPL_LEVEL_START(l, p, refuse, on_global)                                                  \
	if (!(l) || !(p))                                                                          \
		return (refuse);                                                                   \
	__u64 cost = ((l)->flags & XDPL_LF_BYTES) ? (p)->len : 1;                                  \
	if ((l)->key_kind == XDPL_KEY_GLOBAL) {                                                    \
		struct xdpl_state *g = xdpl_global(l);                                             \
		return (on_global);                                                                \
	}

/* xdpl_check_level's answers for a refusal that the refused-until cache
 * answered: a per-key level's and a global level's; -1 for any other. */
#define XDPL_CHECK_REPEAT	 (-2)
#define XDPL_CHECK_REPEAT_GLOBAL (-3)

/* Phase one for one level: decides without writing any state (the sketch
 * aside). Returns a negative answer when the level refuses the packet
 * (-1 or XDPL_CHECK_REPEAT); 0 when it admits it and the key has an
 * entry; else xdpl_miss's answer. A global function,
 * verified once on its own: the verifier explores the rule's levels without
 * re-walking the algorithms, the sketch and the table for every path. */
__attribute__((noinline)) int xdpl_check_level(struct xdpl_level *l, struct xdpl_pkt *p, __u64 now)
{
	__u32 hit = 0;

	XDPL_LEVEL_START(l, p, -1,
			 xdpl_global_level(g, l, p, now, cost, 0, &hit)
			     ? 0
			     : (hit ? XDPL_CHECK_REPEAT_GLOBAL : -1));
	struct xdpl_sketch sk;
	struct xdpl_key k;

	xdpl_key_of(l, p, &k);
	xdpl_sketch_find(l, xdpl_key_hash(&k), &sk, now);
	if (xdpl_refused_key(l, &k, &sk, now))
		return XDPL_CHECK_REPEAT;
	struct xdpl_state *s = xdpl_find(&k, &sk, now);

	if (!s) {
		int seen = xdpl_miss(l, &sk, now, cost);

		if (seen < 0 || seen == XDPL_NO_ENTRY || seen < xdpl_track_after)
			return seen;
		if (!(s = xdpl_find_late(&k, &sk, now)))
			return seen;
	}
	if (xdpl_apply(s, l, now, cost, 0) > 0)
		return 0;
	xdpl_refused_note(s, l, &k, now);
	return -1;
}

/* Phase two for one level: charges the packet. seen is phase one's answer.
 * Returns 1 when charged (or admitted untracked), 0 when the level refuses
 * after all (another CPU got there in between, or no entry could be made:
 * refuse rather than admit untracked traffic -- fail closed; counted). */
__attribute__((noinline)) int xdpl_commit_level(struct xdpl_level *l, struct xdpl_pkt *p, __u64 now,
						__u32 seen)
{
	XDPL_LEVEL_START(l, p, 0, g ? xdpl_charge(g, l, now, cost, NULL) : 0);
	if (xdpl_untracked(seen, p))
		return 1;
	struct xdpl_key k;

	xdpl_key_of(l, p, &k);
	struct xdpl_state *s = xdpl_lookup(&k);

	if (!s) {
		if (!(s = xdpl_state_insert(&k)))
			return 0;
	}
	return xdpl_charge(s, l, now, cost, &k);
}

/* A rule with one level: decides and charges in one pass, with at most one
 * table lookup; the same decisions as check + commit. Inlined into
 * xdpl_main (most rules have one level): as a global function its call cost
 * a known source ~13 ns, for 14k fewer verified instructions. *repeat is
 * set when the refused-until cache refused the packet. */
static __always_inline int xdpl_single_level(struct xdpl_level *l, struct xdpl_pkt *p, __u64 now,
					     __u32 *repeat)
{
	XDPL_LEVEL_START(l, p, 0, xdpl_global_level(g, l, p, now, cost, 1, repeat));
	struct xdpl_sketch sk;
	struct xdpl_key k;

	xdpl_key_of(l, p, &k);
	xdpl_sketch_find(l, xdpl_key_hash(&k), &sk, now);
	if (xdpl_refused_key(l, &k, &sk, now)) {
		*repeat = 1;
		return 0;
	}
	struct xdpl_state *s = xdpl_find(&k, &sk, now);
	/* Only an entry a lookup found (and so marked) is worth caching. */
	struct xdpl_state *found = s;

	if (!s) {
		int seen = xdpl_miss(l, &sk, now, cost);

		if (seen < 0)
			return 0;
		if (xdpl_untracked(seen, p))
			return 1;
		if (sk.flags & XDPL_SK_ON)
			found = s = xdpl_find_late(&k, &sk, now);
		if (!s) {
			if (!(s = xdpl_state_insert(&k)))
				return 0;
		}
	}
	if (xdpl_charge(s, l, now, cost, &k))
		return 1;
	xdpl_refused_note(found, l, &k, now);
	return 0;
}

/* A rule of a global aggregate then a per-source key (the order the
 * compiler gives a per-source limit behind a global one): the same
 * decisions as check + commit below, inlined, with the key's entry looked
 * up once for both phases when it has one. Returns as xdpl_limit. */
static __always_inline int xdpl_global_then_key(struct xdpl_level *lg, struct xdpl_level *l,
						struct xdpl_pkt *p, struct xdpl_clk *clk,
						__u32 *repeat)
{
	__u64 tg = xdpl_now(clk, lg->flags);
	__u64 costg = (lg->flags & XDPL_LF_BYTES) ? p->len : 1;
	struct xdpl_state *g = xdpl_global(lg);
	if (!xdpl_global_level(g, lg, p, tg, costg, 0, repeat))
		return 0;
	__u64 now = xdpl_now(clk, l->flags);
	__u64 cost = (l->flags & XDPL_LF_BYTES) ? p->len : 1;
	struct xdpl_sketch sk;
	struct xdpl_key k;
	int seen = 0;

	xdpl_key_of(l, p, &k);
	xdpl_sketch_find(l, xdpl_key_hash(&k), &sk, now);
	if (xdpl_refused_key(l, &k, &sk, now)) {
		*repeat = 2;
		return 1;
	}
	struct xdpl_state *s = xdpl_find(&k, &sk, now);

	if (!s) {
		seen = xdpl_miss(l, &sk, now, cost);
		if (seen < 0)
			return 1;
		if (seen != XDPL_NO_ENTRY && seen >= xdpl_track_after)
			s = xdpl_find_late(&k, &sk, now);
	}
	if (s && xdpl_apply(s, l, now, cost, 0) <= 0) {
		xdpl_refused_note(s, l, &k, now);
		return 1;
	}
	if (!(g ? xdpl_charge(g, lg, tg, costg, NULL) : 0))
		return 0;
	if (!s) {
		if (xdpl_untracked(seen, p))
			return -1;
		s = xdpl_lookup_hashed(&k, sk.set);
		if (!s && !(s = xdpl_state_insert(&k)))
			return 1;
	}
	return xdpl_charge(s, l, now, cost, &k) ? -1 : 1;
}

/* Evaluates the rule's levels in two phases. First every level decides
 * without writing, in order (the control plane puts the cheap shared
 * aggregates first): a refusal costs no state change anywhere, so a flooding
 * source's dropped packets do not spend its aggregates' budget, and a
 * spoofed flood refused by a global level never touches the per-source
 * table. Then every level commits its charge with compare-and-swap; one that
 * lost a race in between refuses there. Returns the index of the refusing
 * level, or -1 when every level admitted the packet. *repeat is set to the
 * refusing level's index + 1 when a per-key level refused from the
 * refused-until cache (a key refused before: the flow cache copies such
 * refusals, flows.h) and it is the first level, or the second behind a
 * global one; to XDPL_REPEAT_GLOBAL when the first level is global and
 * refused from that cache (its key repeats for every source of a spoofed
 * flood: the flow cache copies it under a key without the source). */
static __always_inline int xdpl_limit(struct xdpl_rule *r, struct xdpl_pkt *p, __u32 *repeat)
{
	struct xdpl_clk c, *clk = &c;

	xdpl_clk_start(clk);
	__u32 n = r->nlevels;

	/* One level (most rules): nothing else can refuse in between, so one
	 * pass decides and charges, with one table lookup. */
	if (n == 1) {
		struct xdpl_level *l = &r->levels[0];

		return xdpl_single_level(l, p, xdpl_now(clk, l->flags), repeat) ? -1 : 0;
	}
	if (n == 2 && r->levels[0].key_kind == XDPL_KEY_GLOBAL &&
	    r->levels[1].key_kind != XDPL_KEY_GLOBAL)
		return xdpl_global_then_key(&r->levels[0], &r->levels[1], p, clk, repeat);
	__u32 seen[XDPL_MAX_LEVELS] = {};

#pragma unroll
	for (int i = 0; i < XDPL_MAX_LEVELS; i++) {
		if (i >= n)
			break;
		struct xdpl_level *l = &r->levels[i];
		int c = xdpl_check_level(l, p, xdpl_now(clk, l->flags));

		if (c < 0) {
			if (i == 0)
				*repeat = c == XDPL_CHECK_REPEAT	  ? 1
					  : c == XDPL_CHECK_REPEAT_GLOBAL ? XDPL_REPEAT_GLOBAL
									  : 0;
			return i;
		}
		seen[i] = c;
	}
#pragma unroll
	for (int i = 0; i < XDPL_MAX_LEVELS; i++) {
		if (i >= n)
			break;
		struct xdpl_level *l = &r->levels[i];

		if (!xdpl_commit_level(l, p, xdpl_now(clk, l->flags), seen[i]))
			return i;
	}
	return -1;
}

#endif
