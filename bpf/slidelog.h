/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* sliding_log: exact for small limits. A key's log holds the times of its
 * last `limit` admissions; a packet is admitted when the oldest of them is
 * at least a window old, so no window-long interval ever holds more than
 * `limit` admissions, whichever CPUs the packets arrive on.
 *
 * The log is updated under a lock that is one bit of its sequence word,
 * taken with compare-and-swap: an LRU map cannot hold a bpf_spin_lock, and a
 * plain hash that could would never evict. The word is
 * admissions-so-far << 1 | locked. A writer sets the bit, stores the new
 * time in t[count % limit] (where the admission `limit` back was) and
 * clears the bit while adding one to the count, in one compare-and-swap. A
 * packet over the limit only reads: sequence, times, sequence again; an
 * unchanged even sequence means it read one consistent log, and it is
 * refused without writing, so a flood does not bounce the log's cache line
 * between CPUs. The lock is held for a few instructions with no helper call
 * and XDP is not preempted; a packet that finds it held retries, and after
 * XDPL_CAS_TRIES is dropped as contended (counted), never admitted
 * unchecked.
 *
 * Admission times never go backwards: a packet is logged at max(now, the
 * newest logged time), as another CPU may have read a later clock. Then
 * t[k] - t[k - limit] >= window for every k, which is the guarantee.
 *
 * model/slidelog.go mirrors this operation for operation. */
#ifndef XDPLIMIT_SLIDELOG_H
#define XDPLIMIT_SLIDELOG_H

#include <linux/bpf.h>
#include <linux/errno.h>
#include <bpf/bpf_helpers.h>
#include "xdplimit_maps.h"
#include "atomics.h"
#include "counters.h"

/* Where admission i's time is in a log of limit n. The mask is a no-op
 * for n <= XDPL_LOG_MAX, so clang drops it; the empty asm keeps it for the
 * verifier, which cannot bound a modulo by a register. */
static __always_inline __u64 xdpl_log_slot(__u64 i, __u64 n)
{
	__u64 r = i % n;

	asm volatile("" : "+r"(r));
	return r & (XDPL_LOG_MAX - 1);
}

/* The log of a state entry; NULL when it has none yet (no admission) or it
 * was evicted, which reads as an empty log. */
static __always_inline struct xdpl_log *xdpl_log_find(struct xdpl_state *s)
{
	__u64 id = XDPL_READ_ONCE(s->a);

	if (!id)
		return NULL;
	return bpf_map_lookup_elem(&xdpl_logs, &id);
}

/* The log of a state entry, created when missing. Two CPUs creating one at
 * once agree on the id through the entry's word a, and on the log through
 * BPF_NOEXIST and a second lookup. NULL (counted) when it cannot be made:
 * the caller refuses, never admits unlogged. */
static __always_inline struct xdpl_log *xdpl_log_make(struct xdpl_state *s)
{
	__u32 zero = 0;
	struct xdpl_log_ids *ids = bpf_map_lookup_elem(&xdpl_log_ids, &zero);
	__u64 id = XDPL_READ_ONCE(s->a);

	if (!ids)
		return NULL;
	if (!id) {
		__u64 mine = __sync_fetch_and_add(&ids->next, 1) + 1;
		__u64 old = __sync_val_compare_and_swap(&s->a, 0, mine);

		id = old ? old : mine;
	}
	struct xdpl_log *g = bpf_map_lookup_elem(&xdpl_logs, &id);

	if (g)
		return g;
	long err = bpf_map_update_elem(&xdpl_logs, &id, &ids->empty, BPF_NOEXIST);

	if (err && err != -EEXIST)
		xdpl_count(XDPL_C_INSERT_FAIL, 0);
	g = bpf_map_lookup_elem(&xdpl_logs, &id);
	if (!g)
		xdpl_count(XDPL_C_INSERT_FAIL, 0);
	return g;
}

/* Decides on h admissions so far: 1 when the packet may be logged, at the
 * time stored in *at. */
static __always_inline int xdpl_log_allows(struct xdpl_log *g, __u64 h, __u64 n, __u64 w, __u64 now,
					   __u64 *at)
{
	__u64 newest = h ? XDPL_READ_ONCE(g->t[xdpl_log_slot(h - 1, n)]) : 0;

	*at = newest > now ? newest : now;
	if (h < n)
		return 1;
	return (__s64)(*at - XDPL_READ_ONCE(g->t[xdpl_log_slot(h, n)])) >= (__s64)w;
}

/* w = window in ns (the level's p1), n = limit (p2: 1..XDPL_LOG_MAX
 * packets).
 *
 * A global function, verified once on its own: inlined into every level of
 * xdpl_main, its lock loop multiplied the states the verifier walks past the
 * 1M-instruction limit once the round's other features were in. The state
 * entry is a map value the caller passes as memory of its size. */
__attribute__((noinline)) int xdpl_sliding_log(struct xdpl_state *s, struct xdpl_level *l,
					       __u64 now, __u64 cost, __u32 commit)
{
	if (!s || !l)
		return 0;
	__u64 w = l->p1, n = l->p2;

	if (cost != 1 || n == 0 || n > XDPL_LOG_MAX)
		return 0; /* packets only; the policy refuses anything else */
	struct xdpl_log *g = commit ? xdpl_log_make(s) : xdpl_log_find(s);

	if (!g)
		return !commit; /* decide: an empty log admits; commit: no log */
	for (int i = 0; i < XDPL_CAS_TRIES; i++) {
		__u64 seq = XDPL_READ_ONCE(g->seq);
		__u64 h = seq >> 1, at;

		if (seq & 1)
			continue; /* another CPU is logging */
		int ok = xdpl_log_allows(g, h, n, w, now, &at);

		if (XDPL_READ_ONCE(g->seq) != seq)
			continue; /* read while another CPU logged: read again */
		if (!ok)
			return 0;
		if (!commit)
			return 1;
		if (__sync_val_compare_and_swap(&g->seq, seq, seq | 1) != seq)
			continue;
		/* Locked. Decide again: the compare-and-swap orders what this
		 * CPU reads after it, where plain reads may have been early. */
		if (!xdpl_log_allows(g, h, n, w, now, &at)) {
			__sync_val_compare_and_swap(&g->seq, seq | 1, seq);
			return 0;
		}
		XDPL_WRITE_ONCE(g->t[xdpl_log_slot(h, n)], at);
		/* Unlock and count in one step. A compare-and-swap rather than
		 * an add: should the LRU have recycled the log meanwhile, its
		 * new owner's word is left alone. */
		__sync_val_compare_and_swap(&g->seq, seq | 1, seq + 2);
		return 1;
	}
	return -1;
}

#endif
