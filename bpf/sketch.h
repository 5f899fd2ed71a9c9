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
#include "state.h"

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
 *   bits 20-29  the mark epoch (ns >> XDPL_SKETCH_MARK_SHIFT; only the
 *               first XDPL_SKETCH_MARK_ROWS rows' cells carry marks)
 *   bit  30     refused: a key hashed here was refused from its state entry
 *               in the mark epoch, and the refused-until cache (refused.h)
 *               holds it: only then is that cache probed
 *   bit  31     marked: a key hashed here used its state entry in the mark
 *               epoch (or, read one mark epoch later, the one before)
 * The epochs wrap (68 s, 4.6 min): a cell untouched for a whole turn reads
 * as current, which only overestimates a count (a key tracked early), marks
 * a key (a lookup that finds nothing) or flags a refusal (a probe that
 * finds nothing): never a verdict.
 * A key is looked up in the state table only when all its cells are marked:
 * a spoofed source's packet then costs its four cells (one cache line) and no
 * table lookup, the dearest part of it in a big table. A hit marks, an insert does
 * not: a spoofed source inserted through a count-min collision never comes
 * back, and its marks would only send later keys to the table. */
#define XDPL_CELL_COUNT_MAX   0xff
#define XDPL_CELL_EPOCH_SHIFT 8
#define XDPL_CELL_EPOCH_MASK  0xfff
#define XDPL_CELL_MARK_SHIFT  20
#define XDPL_CELL_MARK_MASK   0x3ff
#define XDPL_CELL_REFUSED     (1U << 30)
#define XDPL_CELL_MARKED      (1U << 31)
#define XDPL_CELL_COUNT_BITS  0xfffff /* the count and its epoch */

/* Where a key's hash (xdpl_key_hash) places it: its line of the
 * CPU's region by the bits from XDPL_SKETCH_LINE_SHIFT (at most 17 of them:
 * XDPL_SKETCH_MAX_WIDTH), each row's cell in the line by two bits from
 * XDPL_SKETCH_CELL_SHIFT; the IPv4 table's set is the low bits of the same
 * hash (at most 30), so none of the three shares a bit. */
#define XDPL_SKETCH_LINE_SHIFT 32
#define XDPL_SKETCH_CELL_SHIFT 56

/* A key's cells in this CPU's sketch: its line ln, and of its hash the low
 * half (set: where the IPv4 table holds it) and the top byte (cells: each
 * row's cell in the line). flags: XDPL_SK_*. Small, and one word of flags:
 * it lives across calls in xdpl_main, whose frame 6.1's limit on a chain
 * of calls' stack leaves no room to grow. */
struct xdpl_sketch {
	struct xdpl_sketch_line *ln;
	__u32 set;
	__u8 cells;
	__u8 flags;
};

/* What all the key's mark cells said when found, read once for the
 * packet's decisions: */
#define XDPL_SK_MARKED	1 /* marked in this mark epoch or the last: looked up */
#define XDPL_SK_CURRENT 2 /* marked in this one: a hit writes nothing */
#define XDPL_SK_REFUSED 4 /* flagged with a refusal in this one */
/* The sketch applies: not for global keys, XDPL_LF_TRACK_FIRST,
 * track_after 1, a CPU beyond the sketch's regions, where every key is
 * looked up and tracked from its first packet. */
#define XDPL_SK_ON 8
/* The state table was searched for the key, and it was missing. */
#define XDPL_SK_LOOKED 16

/* The hash of key k that places it in the sketch and, for a key of the
 * IPv4 table, in that table: computed once for both. Other keys (IPv6,
 * with a port) are hashed with the sketch's seed. */
static __always_inline __u64 xdpl_key_hash(struct xdpl_key *k)
{
	if (xdpl_in_table4(k))
		return xdpl_key4_hash(k);
	__u64 h = xdpl_fmix64(xdpl_sketch_seed ^
			      ((__u64)k->state_id << 32 | (__u64)k->port << 8 | k->family));

	h = xdpl_fmix64(h ^ k->addr[0]);
	if (k->family == 6) {
		h = xdpl_fmix64(h ^ k->addr[1]);
		h = xdpl_fmix64(h ^ k->addr[2]);
		h = xdpl_fmix64(h ^ k->addr[3]);
	}
	return h;
}

/* The index of the line of hash h in this CPU's region of the sketch map:
 * a new key costs one cache miss (and one TLB miss), not one per row. */
static __always_inline __u32 xdpl_sketch_line_of(__u64 h)
{
	__u32 lines = (xdpl_sketch_width_mask + 1) * XDPL_SKETCH_ROWS / XDPL_SKETCH_LINE_CELLS;

	return bpf_get_smp_processor_id() * lines + ((h >> XDPL_SKETCH_LINE_SHIFT) & (lines - 1));
}

/* Row r's cell of the key: four of the line's sixteen cells are the row's. */
static __always_inline __u32 *xdpl_sketch_cell(struct xdpl_sketch *sk, int r)
{
	return &sk->ln->c[r * XDPL_SKETCH_ROW_CELLS +
			  ((sk->cells >> (2 * r)) & (XDPL_SKETCH_ROW_CELLS - 1))];
}

/* A mark cell's bits that say it is marked in the mark epoch of now. */
static __always_inline __u32 xdpl_sketch_mark_of(__u64 now)
{
	return XDPL_CELL_MARKED | ((__u32)(now >> XDPL_SKETCH_MARK_SHIFT) & XDPL_CELL_MARK_MASK)
				      << XDPL_CELL_MARK_SHIFT;
}

#define XDPL_CELL_MARK_BITS (XDPL_CELL_MARKED | XDPL_CELL_MARK_MASK << XDPL_CELL_MARK_SHIFT)

/* What one mark cell v says at now, as XDPL_SK_* bits. */
static __always_inline __u32 xdpl_sketch_cell_marks(__u32 v, __u64 now)
{
	__u32 e = now >> XDPL_SKETCH_MARK_SHIFT;

	if ((v & XDPL_CELL_MARK_BITS) == xdpl_sketch_mark_of(now))
		return XDPL_SK_MARKED | XDPL_SK_CURRENT |
		       (v & XDPL_CELL_REFUSED ? XDPL_SK_REFUSED : 0);
	if ((v & XDPL_CELL_MARKED) &&
	    ((e - (v >> XDPL_CELL_MARK_SHIFT)) & XDPL_CELL_MARK_MASK) == 1)
		return XDPL_SK_MARKED;
	return 0;
}

/* Finds the cells of the key of level l whose hash is h, and reads what its
 * mark cells (those of the first XDPL_SKETCH_MARK_ROWS rows) all say at
 * now. Marks need fewer rows than counts: only hits set them, which a
 * spoofed flood does not make, and a false mark costs a lookup, not a
 * verdict; every packet of a known source reads them. */
static __always_inline void xdpl_sketch_find(struct xdpl_level *l, __u64 h, struct xdpl_sketch *sk,
					     __u64 now)
{
	sk->flags = 0;
	sk->set = h;
	sk->cells = h >> XDPL_SKETCH_CELL_SHIFT;
	if (l->key_kind == XDPL_KEY_GLOBAL || (l->flags & XDPL_LF_TRACK_FIRST) ||
	    xdpl_track_after <= 1)
		return;
	__u32 idx = xdpl_sketch_line_of(h);

	sk->ln = bpf_map_lookup_elem(&xdpl_sketch_map, &idx);
	if (!sk->ln)
		return;
	__u32 marks = XDPL_SK_MARKED | XDPL_SK_CURRENT | XDPL_SK_REFUSED;

#pragma unroll
	for (int r = 0; r < XDPL_SKETCH_MARK_ROWS; r++)
		marks &= xdpl_sketch_cell_marks(*xdpl_sketch_cell(sk, r), now);
	sk->flags = XDPL_SK_ON | marks;
}

/* Marks the key's cells: it has a state entry and just used it. Writes only
 * when the mark epoch moved, so a busy source costs reads; the move clears
 * a refusal's flag, whose cache entry held for its own epoch only. */
static __always_inline void xdpl_sketch_mark(struct xdpl_sketch *sk, __u64 now)
{
	__u32 m = xdpl_sketch_mark_of(now);

	if (sk->flags & XDPL_SK_CURRENT)
		return;
#pragma unroll
	for (int r = 0; r < XDPL_SKETCH_MARK_ROWS; r++) {
		__u32 v = *xdpl_sketch_cell(sk, r);

		/* Only this CPU writes its region: no atomics needed. */
		if ((v & XDPL_CELL_MARK_BITS) != m)
			*xdpl_sketch_cell(sk, r) = (v & XDPL_CELL_COUNT_BITS) | m;
	}
}

/* Flags the key's mark cells with a refusal noted in the refused-until
 * cache: called after a lookup found the key, which marked them in this
 * mark epoch. */
static __always_inline void xdpl_sketch_flag_refused(struct xdpl_sketch *sk)
{
#pragma unroll
	for (int r = 0; r < XDPL_SKETCH_MARK_ROWS; r++)
		*xdpl_sketch_cell(sk, r) |= XDPL_CELL_REFUSED;
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
		__u32 v = *xdpl_sketch_cell(sk, r);
		__u32 n = ((v >> XDPL_CELL_EPOCH_SHIFT) & XDPL_CELL_EPOCH_MASK) == e
			      ? (v & XDPL_CELL_COUNT_MAX)
			      : 0;

		if (n < XDPL_CELL_COUNT_MAX)
			n++;
		*xdpl_sketch_cell(sk, r) =
		    (v & ~XDPL_CELL_COUNT_BITS) | e << XDPL_CELL_EPOCH_SHIFT | n;
		if (n < est)
			est = n;
		/* One row at a time: the four rows' cells loaded at once
		 * spilled, in frames that add to xdpl_main's. */
		asm volatile("" ::: "memory");
	}
	return est;
}

#endif
