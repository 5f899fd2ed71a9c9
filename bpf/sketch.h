/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The admission sketch: a per-CPU count-min sketch in front of the state
 * tables. It counts keys that have no state entry, so that a spoofed source
 * sending one packet never costs an insert, and marks keys that used their
 * entry, so that a spoofed source never costs a table lookup either. */
#ifndef XDPLIMIT_SKETCH_H
#define XDPLIMIT_SKETCH_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "xdplimit_maps.h"
#include "hash.h"

/* A key missing from the state table gets an entry only once this CPU's
 * sketch has seen it this many times in the current epoch; before that its
 * packets are admitted at that level without an entry (aggregate levels
 * still apply). A spoofed source that sends one packet never costs an
 * insert. An untracked key passes at most track_after - 1 packets per CPU
 * per epoch; the control plane turns the sketch off (XDPL_LF_TRACK_FIRST)
 * on levels whose limit is below that. 1 turns it off everywhere. */
volatile const __u32 xdpl_track_after = 2;
/* Random per load, so that an attacker cannot aim sources at one cell. */
volatile const __u64 xdpl_sketch_seed = 0;
/* Cells per sketch row per CPU, minus one (a power of two minus one). */
volatile const __u32 xdpl_sketch_width_mask = 2047;

/* A sketch cell is a u64:
 *   bits  0-15  count: packets of keys hashed here that had no state entry,
 *               in the count epoch (saturating)
 *   bits 16-31  the count epoch (ns >> XDPL_SKETCH_EPOCH_SHIFT)
 *   bits 32-47  the mark epoch (ns >> XDPL_SKETCH_MARK_SHIFT; only the
 *               first XDPL_SKETCH_MARK_ROWS rows' cells carry marks)
 *   bit  48     marked: a key hashed here used its state entry in the mark
 *               epoch (or, read one mark epoch later, the one before)
 * A key is looked up in the state table only when all its cells are marked:
 * a spoofed source's packet then costs its four cells (one page) and no table
 * lookup, the dearest part of it in a big table. A hit marks, an insert does
 * not: a spoofed source inserted through a count-min collision never comes
 * back, and its marks would only send later keys to the table. */
#define XDPL_CELL_MARKED     (1ULL << 48)
#define XDPL_CELL_COUNT_MASK 0xffffffffULL

/* A key's cells in this CPU's sketch. on = 0 where the sketch does not apply
 * (global keys, XDPL_LF_TRACK_FIRST, track_after 1, a CPU beyond the sketch's
 * regions): every key is then looked up and tracked from its first packet.
 * looked: the state table was searched for the key (and it was missing). */
struct xdpl_sketch {
	__u64 *c[XDPL_SKETCH_ROWS];
	int on;
	int looked;
};

static __always_inline void xdpl_sketch_find(struct xdpl_level *l, struct xdpl_key *k,
					     struct xdpl_sketch *sk)
{
	sk->on = 0;
	sk->looked = 0;
	if (l->key_kind == XDPL_KEY_GLOBAL || (l->flags & XDPL_LF_TRACK_FIRST) ||
	    xdpl_track_after <= 1)
		return;
	__u64 h = xdpl_fmix64(xdpl_sketch_seed ^
			      ((__u64)k->state_id << 32 | (__u64)k->port << 8 | k->family));

	h = xdpl_fmix64(h ^ k->addr[0]);
	if (k->family == 6) {
		h = xdpl_fmix64(h ^ k->addr[1]);
		h = xdpl_fmix64(h ^ k->addr[2]);
		h = xdpl_fmix64(h ^ k->addr[3]);
	}
	__u32 width = xdpl_sketch_width_mask + 1;
	__u32 base = bpf_get_smp_processor_id() * XDPL_SKETCH_ROWS * width;
	/* A key's cells share one 4 KiB page of the region, each row its
	 * part of the page: one TLB miss per new key instead of one per row
	 * (a page walk is the dearest part of a miss in a VM). Keys spread
	 * evenly over the pages, so the rows' collisions stay independent. */
	__u32 page = (h >> 32) & ((width * XDPL_SKETCH_ROWS / XDPL_SKETCH_PAGE_CELLS) - 1);

	base += page * XDPL_SKETCH_PAGE_CELLS;
#pragma unroll
	for (int r = 0; r < XDPL_SKETCH_ROWS; r++) {
		__u32 idx = base + r * XDPL_SKETCH_ROW_CELLS +
			    ((h >> (r * 8)) & (XDPL_SKETCH_ROW_CELLS - 1));
		__u64 *c = bpf_map_lookup_elem(&xdpl_sketch_map, &idx);

		if (!c)
			return;
		sk->c[r] = c;
	}
	sk->on = 1;
}

/* Whether the key's marked cells (those of the first XDPL_SKETCH_MARK_ROWS
 * rows) are all marked in this mark epoch or the last. Marks need fewer
 * rows than counts: only hits set them, which a spoofed flood does not
 * make, and a false mark costs a lookup, not a verdict; every packet of a
 * known source reads them. */
static __always_inline int xdpl_sketch_marked(struct xdpl_sketch *sk, __u64 now)
{
	__u32 m = (now >> XDPL_SKETCH_MARK_SHIFT) & 0xffff;

#pragma unroll
	for (int r = 0; r < XDPL_SKETCH_MARK_ROWS; r++) {
		__u64 v = *sk->c[r];

		if (!(v & XDPL_CELL_MARKED) || ((m - (__u32)(v >> 32)) & 0xffff) > 1)
			return 0;
	}
	return 1;
}

/* Marks the key's cells: it has a state entry and just used it. Writes only
 * when the mark epoch moved, so a busy source costs reads. */
static __always_inline void xdpl_sketch_mark(struct xdpl_sketch *sk, __u64 now)
{
	__u64 m = XDPL_CELL_MARKED | ((now >> XDPL_SKETCH_MARK_SHIFT) & 0xffff) << 32;

#pragma unroll
	for (int r = 0; r < XDPL_SKETCH_MARK_ROWS; r++) {
		__u64 v = *sk->c[r];
		__u64 w = (v & XDPL_CELL_COUNT_MASK) | m;

		/* Only this CPU writes its region: no atomics needed. */
		if (v != w)
			*sk->c[r] = w;
	}
}

/* Counts a key without a state entry; returns its estimated count in the
 * current epoch, this packet included. Count-min never underestimates, so a
 * source that really sent track_after packets is always tracked; a collision
 * only tracks a source early. */
static __always_inline __u32 xdpl_sketch_count(struct xdpl_sketch *sk, __u64 now)
{
	__u32 e = (now >> XDPL_SKETCH_EPOCH_SHIFT) & 0xffff;
	__u32 est = 0xffff;

#pragma unroll
	for (int r = 0; r < XDPL_SKETCH_ROWS; r++) {
		__u64 v = *sk->c[r];
		__u32 n = ((v >> 16) & 0xffff) == e ? (v & 0xffff) : 0;

		if (n < 0xffff)
			n++;
		*sk->c[r] = (v & ~XDPL_CELL_COUNT_MASK) | e << 16 | n;
		if (n < est)
			est = n;
	}
	return est;
}

#endif
