/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Fleet levels: a limit shared by many hosts through Redis. The packet path
 * never waits for the network. It enforces from its own state, and tells
 * the control plane which keys admitted packets; the control plane exchanges
 * their consumption with Redis every sync and folds the other hosts' into
 * the local state with xdpl_fleet_apply, a program it runs with
 * BPF_PROG_TEST_RUN so that the fold is atomic against the packet path.
 *
 * token_bucket: state word b holds the sync epoch in its top 16 bits and the
 * units admitted since the control plane last took them in its low 48. The
 * first admission of a key in an epoch reports the key.
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

/* After a fleet level admitted a packet (ok: the algorithm's answer, 2 when
 * the packet opened a window). */
static __always_inline void xdpl_fleet_admitted(struct xdpl_state *s, struct xdpl_level *l,
						struct xdpl_key *k, __u64 cost, int ok)
{
	__u32 zero = 0;

	if (l->algorithm != XDPL_ALG_TOKEN_BUCKET) {
		if (ok == 2)
			xdpl_fleet_report(l, k);
		return;
	}
	struct xdpl_fleet_sync *fc = bpf_map_lookup_elem(&xdpl_fleet_ctl, &zero);

	if (!fc)
		return;
	__u64 epoch = (__u64)(fc->epoch & 0xffff) << XDPL_FLEET_EPOCH_SHIFT;
	__u64 old = __sync_fetch_and_add(&s->b, cost);

	if ((old & ~XDPL_FLEET_PENDING_MASK) == epoch)
		return;
	/* The first admission of the epoch: whoever moves the epoch reports. */
	for (int i = 0; i < XDPL_CAS_TRIES; i++) {
		__u64 cur = XDPL_READ_ONCE(s->b);

		if ((cur & ~XDPL_FLEET_PENDING_MASK) == epoch)
			return;
		if (__sync_val_compare_and_swap(&s->b, cur,
						(cur & XDPL_FLEET_PENDING_MASK) | epoch) == cur) {
			xdpl_fleet_report(l, k);
			return;
		}
	}
}

#endif
