/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The IPv4 state table: per-source IPv4 keys (the common key) in an array
 * of sets, XDPL_WAYS4 ways each, found by a keyed hash of the key. A new key
 * takes its set's empty way, else the one used in the fewest ticks, the
 * least recently used among those (the stamps, below): the kernel's LRU
 * hash pays ~600 ns for an insert into a full table (its lists, locks and
 * free pools), this a set's lock and two cache lines.
 *
 * Only an insert changes a set's keys, under the set's lock, so two CPUs
 * inserting one key make one entry. Lookups take no lock: a key is
 * published (exchanged into its way, a full barrier) only after its state
 * is zeroed. A CPU that found a key just before another evicted it may
 * still update the reused state once: the kernel's preallocated LRU hash
 * reuses an element the same way. docs/internals/state-tables.md has the
 * measurements. */
#ifndef XDPLIMIT_TABLE4_H
#define XDPLIMIT_TABLE4_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "xdplimit_maps.h"
#include "atomics.h"
#include "counters.h"
#include "hash.h"

/* Random per table (kept in xdpl_meta with it): a flood cannot aim its
 * sources at one set to evict a source it wants to reset. */
volatile const __u64 xdpl_table4_seed = 0;
/* Sets minus one (a power of two minus one); set by the loader. */
volatile const __u32 xdpl_table4_mask = XDPL_MAX_SOURCES / XDPL_WAYS4 - 1;

/* How often an insert tries for a busy set's lock before it gives up: the
 * holder is another CPU's insert, a few dozen instructions in a softirq. */
#define XDPL_SET4_TRIES 64

/* The word a set holds for a level's key of an IPv4 source: never 0 (state ids start
 * at 1). Go's maps.key4Word is the same. */
static __always_inline __u64 xdpl_key4_word(__u32 state_id, __be32 addr)
{
	return (__u64)state_id << 32 | addr;
}

/* The hash of key word kw: its set is the low bits (as in Go, maps.Limiter.set4);
 * the admission sketch places the key by bits above those (sketch.h), so
 * that a packet hashes its key once. */
static __always_inline __u64 xdpl_set4_hash(__u64 kw)
{
	return xdpl_fmix64(xdpl_table4_seed ^ kw);
}

static __always_inline struct xdpl_set4 *xdpl_set4_at(__u64 h)
{
	__u32 i = h & xdpl_table4_mask;

	return bpf_map_lookup_elem(&xdpl_sources4, &i);
}

static __always_inline struct xdpl_set4 *xdpl_set4_of(__u64 kw)
{
	return xdpl_set4_at(xdpl_set4_hash(kw));
}

/* A way's stamp (used[]): the jiffies of its key's last use in the high 30
 * bits, in the low 2 the ticks it was used in (after its insert, at most
 * 3) while it was never idle for XDPL_SET4_FRESH ticks. An insert evicts the
 * key used in the fewest ticks, the least recently used among those: a
 * flood of one-packet sources replaces its own keys, not a source that
 * keeps sending (plain LRU lets four new keys between two of its packets
 * evict it, and an evicted source starts over with a full burst). */
#define XDPL_SET4_USES	3
#define XDPL_SET4_FRESH 256 /* ticks: a second at HZ=250 */

/* The stamp's time: jiffies (the verifier inlines the helper as a load). */
static __always_inline __u32 xdpl_set4_now(void)
{
	return (__u32)bpf_jiffies64() << 2;
}

/* The ticks a key used now was used in, given its stamp u: a function of
 * its own, called once a tick at most, which keeps its registers out of
 * xdpl_main's frame (6.1 allows a chain of calls 512 bytes of stack). */
static __attribute__((noinline, unused)) __u32 xdpl_set4_uses(__u32 u, __u32 now)
{
	__u32 uses = u & XDPL_SET4_USES;

	if (now - (u & ~XDPL_SET4_USES) >= (XDPL_SET4_FRESH << 2))
		uses = 0;
	return uses < XDPL_SET4_USES ? uses + 1 : uses;
}

/* Written only when the tick changed, so that a flooding source's refused
 * packets write its set's line once a tick at most. */
static __always_inline void xdpl_set4_touch(struct xdpl_set4 *set, int w)
{
	__u32 now = xdpl_set4_now(), u = set->used[w];

	if ((u ^ now) >= 4)
		set->used[w] = now | xdpl_set4_uses(u, now);
}

/* kw's state in set, or NULL. */
static __always_inline struct xdpl_state *xdpl_find4(struct xdpl_set4 *set, __u64 kw)
{
#pragma unroll
	for (int w = 0; w < XDPL_WAYS4; w++) {
		if (set->key[w] == kw) {
			xdpl_set4_touch(set, w);
			return &set->st[w];
		}
	}
	return NULL;
}

/* How readily a way gives its key up: an empty way most, then a key used
 * in fewer ticks (none if idle for XDPL_SET4_FRESH ticks), then an older
 * one. */
static __always_inline __u32 xdpl_set4_spare(__u64 k, __u32 u, __u32 now)
{
	__u32 age = (now - (u & ~XDPL_SET4_USES)) >> 2, uses = u & XDPL_SET4_USES;

	if (!k)
		return 0xffffffff;
	if (age >= XDPL_SET4_FRESH)
		uses = 0;
	return (XDPL_SET4_USES - uses) << 30 | (age & ((1 << 30) - 1));
}

/* The way kw takes in set: the one already holding it (another CPU's
 * insert got there first), else the sparest. Called under the set's lock.
 * *found: kw was there. */
static __always_inline int xdpl_set4_way(struct xdpl_set4 *set, __u64 kw, int *found)
{
	__u32 now = xdpl_set4_now(), most = 0;
	int victim = 0;

	*found = 0;
#pragma unroll
	for (int w = 0; w < XDPL_WAYS4; w++) {
		__u64 k = XDPL_READ_ONCE(set->key[w]);
		__u32 spare = xdpl_set4_spare(k, set->used[w], now);

		if (k == kw) {
			*found = 1;
			return w;
		}
		if (spare > most) {
			most = spare;
			victim = w;
		}
	}
	return victim;
}

/* Inserts kw into its set (or finds it there, made meanwhile) and returns
 * its state; NULL when the set's lock stayed busy or there is no set
 * (counted as an insert failure: the caller refuses, fail closed). A
 * function of its own, called: inlined at each of the packet path's
 * inserts, its registers' spills grew xdpl_main's frame past what 6.1
 * allows a chain of calls (TestVerifierBudget). */
static __attribute__((noinline, unused)) struct xdpl_state *xdpl_insert4(__u64 kw)
{
	struct xdpl_set4 *set = xdpl_set4_of(kw);
	int i, found;

	if (!set)
		goto fail;
	for (i = 0; i < XDPL_SET4_TRIES; i++) {
		if (*(volatile __u32 *)&set->lock == 0 &&
		    __sync_val_compare_and_swap(&set->lock, 0, 1) == 0)
			break;
	}
	if (i == XDPL_SET4_TRIES)
		goto fail;
	int w = xdpl_set4_way(set, kw, &found) & (XDPL_WAYS4 - 1);

	if (!found) {
		/* The evicted key's readers miss from here on (what they
		 * found before may still update the state once); kw's find its
		 * state zeroed, the empty state every algorithm starts from:
		 * the exchange that publishes kw is a full barrier. */
		XDPL_WRITE_ONCE(set->key[w], 0);
		XDPL_WRITE_ONCE(set->st[w].a, 0);
		XDPL_WRITE_ONCE(set->st[w].b, 0);
		set->used[w] = xdpl_set4_now();
		__sync_lock_test_and_set(&set->key[w], kw);
		xdpl_count(XDPL_C_NEW_SOURCE, 0);
	}
	/* A plain store: the exchange above, or the lock's compare-and-swap,
	 * already ordered every key write before it. */
	*(volatile __u32 *)&set->lock = 0;
	return &set->st[w];
fail:
	xdpl_count(XDPL_C_INSERT_FAIL, 0);
	return NULL;
}

#endif
