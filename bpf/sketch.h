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

/* A sketch cell is a u32:
 *   bits  0-7   count: packets of keys hashed here that had no state entry,
 *               in the count epoch (saturating; track_after is at most 255)
 *   bits  8-19  the count epoch (ns >> XDPL_SKETCH_EPOCH_SHIFT)
 *   bits 20-30  the mark epoch (ns >> XDPL_SKETCH_MARK_SHIFT; only the
 *               first XDPL_SKETCH_MARK_ROWS rows' cells carry marks)
 *   bit  31     marked: a key hashed here used its state entry in the mark
 *               epoch (or, read one mark epoch later, the one before)
 * The epochs wrap (68 s, 9 min): a cell untouched for a whole turn reads as
 * current, which only overestimates a count (a key tracked early) or marks
 * a key (a lookup that finds nothing): never a verdict.
 * A key is looked up in the state table only when all its cells are marked:
 * a spoofed source's packet then costs its four cells (one cache line) and no
 * table lookup, the dearest part of it in a big table. A hit marks, an insert does
 * not: a spoofed source inserted through a count-min collision never comes
 * back, and its marks would only send later keys to the table. */
#define XDPL_CELL_COUNT_MAX   0xff
#define XDPL_CELL_EPOCH_SHIFT 8
#define XDPL_CELL_EPOCH_MASK  0xfff
#define XDPL_CELL_MARK_SHIFT  20
#define XDPL_CELL_MARK_MASK   0x7ff
#define XDPL_CELL_MARKED      (1U << 31)
#define XDPL_CELL_COUNT_BITS  0xfffff /* the count and its epoch */

/* A key's cells in this CPU's sketch. on = 0 where the sketch does not apply
 * (global keys, XDPL_LF_TRACK_FIRST, track_after 1, a CPU beyond the sketch's
 * regions): every key is then looked up and tracked from its first packet.
 * looked: the state table was searched for the key (and it was missing). */
struct xdpl_sketch {
	__u32 *c[XDPL_SKETCH_ROWS];
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
	__u32 lines = (xdpl_sketch_width_mask + 1) * XDPL_SKETCH_ROWS / XDPL_SKETCH_LINE_CELLS;
	/* A key's cells share one 64-byte line of the CPU's region, each row
	 * four of its sixteen cells, picked by hash bits of its own: a new
	 * key costs one cache miss (and one TLB miss), not one per row. */
	__u32 idx = bpf_get_smp_processor_id() * lines + ((h >> 32) & (lines - 1));
	struct xdpl_sketch_line *ln = bpf_map_lookup_elem(&xdpl_sketch_map, &idx);

	if (!ln)
		return;
#pragma unroll
	for (int r = 0; r < XDPL_SKETCH_ROWS; r++)
		sk->c[r] = &ln->c[r * XDPL_SKETCH_ROW_CELLS +
				  ((h >> (r * 8)) & (XDPL_SKETCH_ROW_CELLS - 1))];
	sk->on = 1;
}

/* Whether the key's marked cells (those of the first XDPL_SKETCH_MARK_ROWS
 * rows) are all marked in this mark epoch or the last. Marks need fewer
 * rows than counts: only hits set them, which a spoofed flood does not
 * make, and a false mark costs a lookup, not a verdict; every packet of a
 * known source reads them. */
static __always_inline int xdpl_sketch_marked(struct xdpl_sketch *sk, __u64 now)
{
	__u32 m = now >> XDPL_SKETCH_MARK_SHIFT;

#pragma unroll
	for (int r = 0; r < XDPL_SKETCH_MARK_ROWS; r++) {
		__u32 v = *sk->c[r];

		if (!(v & XDPL_CELL_MARKED) ||
		    ((m - (v >> XDPL_CELL_MARK_SHIFT)) & XDPL_CELL_MARK_MASK) > 1)
			return 0;
	}
	return 1;
}

/* Marks the key's cells: it has a state entry and just used it. Writes only
 * when the mark epoch moved, so a busy source costs reads. */
static __always_inline void xdpl_sketch_mark(struct xdpl_sketch *sk, __u64 now)
{
	__u32 m = XDPL_CELL_MARKED | ((__u32)(now >> XDPL_SKETCH_MARK_SHIFT) & XDPL_CELL_MARK_MASK)
					 << XDPL_CELL_MARK_SHIFT;

#pragma unroll
	for (int r = 0; r < XDPL_SKETCH_MARK_ROWS; r++) {
		__u32 v = *sk->c[r];
		__u32 w = (v & XDPL_CELL_COUNT_BITS) | m;

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
	__u32 e = (now >> XDPL_SKETCH_EPOCH_SHIFT) & XDPL_CELL_EPOCH_MASK;
	__u32 est = XDPL_CELL_COUNT_MAX;

#pragma unroll
	for (int r = 0; r < XDPL_SKETCH_ROWS; r++) {
		__u32 v = *sk->c[r];
		__u32 n = ((v >> XDPL_CELL_EPOCH_SHIFT) & XDPL_CELL_EPOCH_MASK) == e
			      ? (v & XDPL_CELL_COUNT_MAX)
			      : 0;

		if (n < XDPL_CELL_COUNT_MAX)
			n++;
		*sk->c[r] = (v & ~XDPL_CELL_COUNT_BITS) | e << XDPL_CELL_EPOCH_SHIFT | n;
		if (n < est)
			est = n;
	}
	return est;
}

#endif
