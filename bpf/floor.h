/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The floor programs (the stage benchmark's build only): after the parser,
 * only the work that any limiter giving this product's verdicts must do for
 * a packet, written as cheaply as BPF allows, then the verdict. The
 * datapath's targets are costs above the parser; what these cost above it
 * is how close to the parser a verdict can come on this machine at all:
 *   - XDPL_FLOOR_REFUSED, a known source over its limit: one keyed lookup
 *     (a per-CPU slot by the hash of the source and port, both compared),
 *     the clock against the slot's refusal, the drop counted;
 *   - XDPL_FLOOR_GLOBAL, a global level refusing whatever the source: its
 *     state read from an array slot, the clock against it, the drop
 *     counted;
 *   - XDPL_FLOOR_ADMITTED, a known source under its limit: its state found
 *     in the state table (the IPv4 table, table4.h, shared by the CPUs:
 *     the limit is exact across them), the clock, a GCRA step written by
 *     one compare-and-swap, the pass counted;
 *   - XDPL_FLOOR_ADMITTED_FW and _SW, the same under a fixed window (its
 *     end kept beside its count: a compare, no division) and a sliding
 *     window (two windows' counters in the entry, the index by one
 *     division, the previous window's share compared by multiplying);
 *   - XDPL_FLOOR_INSERTED, a source never seen, the state table full: its
 *     entry inserted (table4.h's insert, the least recently used way of
 *     its set evicted), the pass counted;
 *   - XDPL_FLOOR_UNTRACKED, a source never seen, left without an entry
 *     until it repeats: one cell of one random line of this CPU's region
 *     of the admission sketch (sketch.h) read and written, the pass
 *     counted. Fixed memory that remembers new sources between their
 *     packets is a region as large, and a key's line in it a random one.
 * The first packet of a key teaches the state the next ones are judged by
 * (a refusal for an hour, an entry in the table) and passes. Left out, as
 * no floor has them: the policy's generation, the lists and bans, rule
 * classification, the drop sample, and the first packet's costs. */
#ifndef XDPLIMIT_FLOOR_H
#define XDPLIMIT_FLOOR_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "xdplimit_consts.h"
#include "xdplimit_maps.h"
#include "atomics.h"
#include "clock.h"
#include "account.h"
#include "table4.h"
#include "sketch.h"

#ifdef XDPL_BENCH_STAGES
volatile const __u32 xdpl_bench_floor = 0;

#define XDPL_FLOOR_HOLD_NS (3600ULL * 1000000000ULL)

/* The verdict counted as a rule's is (account.h): one per-CPU slot, no
 * atomics. */
static __always_inline int xdpl_floor_count(struct xdpl_pkt *p, __u32 verdict)
{
	__u32 slot = 0;
	struct xdpl_rule_stats *st = bpf_map_lookup_elem(&xdpl_stats, &slot);

	if (st)
		xdpl_rule_count(st, verdict, p->len);
	return verdict == XDPL_V_DROP ? XDP_DROP : XDP_PASS;
}

static __always_inline int xdpl_floor_refused(struct xdpl_pkt *p)
{
	__u32 a = p->saddr[0] ^ p->saddr[1] ^ p->saddr[2] ^ p->saddr[3];
	__u32 idx = (((__u64)a << 32 | p->dport) * 0x9e3779b97f4a7c15ULL) >> (64 - XDPL_FLOW_BITS);
	struct xdpl_flow *e = bpf_map_lookup_elem(&xdpl_flows, &idx);

	if (!e)
		return XDP_PASS;
	__u64 now = xdpl_coarse_ns();
	__u32 diff = (e->sig.saddr[0] ^ p->saddr[0]) | (e->sig.saddr[1] ^ p->saddr[1]) |
		     (e->sig.saddr[2] ^ p->saddr[2]) | (e->sig.saddr[3] ^ p->saddr[3]) |
		     (e->sig.dport ^ p->dport);

	if (!diff && now < e->until)
		return xdpl_floor_count(p, XDPL_V_DROP);
	__builtin_memcpy(e->sig.saddr, p->saddr, sizeof(e->sig.saddr));
	e->sig.dport = p->dport;
	e->until = now + XDPL_FLOOR_HOLD_NS;
	return xdpl_floor_count(p, XDPL_V_PASS);
}

static __always_inline int xdpl_floor_global(struct xdpl_pkt *p)
{
	__u32 slot = 0;
	struct xdpl_state *g = bpf_map_lookup_elem(&xdpl_globals, &slot);

	if (!g)
		return XDP_PASS;
	__u64 now = xdpl_coarse_ns();

	if (now < g->a)
		return xdpl_floor_count(p, XDPL_V_DROP);
	g->a = now + XDPL_FLOOR_HOLD_NS;
	return xdpl_floor_count(p, XDPL_V_PASS);
}

/* An IPv4 source's entry in the state table, or NULL when it had none and
 * got one (or is not IPv4): that first packet passes. */
static __always_inline struct xdpl_state *xdpl_floor_known(struct xdpl_pkt *p)
{
	if (p->family != 4)
		return NULL;
	__u64 kw = xdpl_key4_word(1, p->saddr[0]);
	struct xdpl_set4 *set = xdpl_set4_of(kw);

	if (!set)
		return NULL;
	struct xdpl_state *st = xdpl_find4(set, kw);

	if (!st)
		xdpl_insert4(kw);
	return st;
}

/* GCRA at one packet a ns with a burst of a second's: an arrival pushes
 * the theoretical arrival time one ns on, and no CPU comes near the limit,
 * but each packet still decides against it and writes its step. */
static __always_inline int xdpl_floor_admitted(struct xdpl_pkt *p)
{
	struct xdpl_state *st = xdpl_floor_known(p);

	if (!st)
		return xdpl_floor_count(p, XDPL_V_PASS);
	__u64 now = xdpl_coarse_ns();
	__u64 tat = st->a;
	__u64 next = (tat > now ? tat : now) + 1;

	if (next - now > 1000000000ULL)
		return xdpl_floor_count(p, XDPL_V_DROP);
	/* Lost to another CPU's packet: that one took the step. */
	__sync_val_compare_and_swap(&st->a, tat, next);
	return xdpl_floor_count(p, XDPL_V_PASS);
}

/* The windows' floors: a second long, a limit no CPU comes near. */
#define XDPL_FLOOR_WINDOW_NS	(1000000000ULL)
#define XDPL_FLOOR_WINDOW_LIMIT (1ULL << 39)

/* A fixed window: the count in a, the window's end in b. A packet inside
 * the window costs a compare; only the one that opens the next divides. */
static __always_inline int xdpl_floor_admitted_fw(struct xdpl_pkt *p)
{
	struct xdpl_state *st = xdpl_floor_known(p);

	if (!st)
		return xdpl_floor_count(p, XDPL_V_PASS);
	__u64 now = xdpl_coarse_ns();
	__u64 old = st->a;

	if (now >= st->b) {
		/* The CPU whose swap opens the window writes its end. */
		if (__sync_val_compare_and_swap(&st->a, old, 1) == old)
			st->b = (now / XDPL_FLOOR_WINDOW_NS + 1) * XDPL_FLOOR_WINDOW_NS;
		return xdpl_floor_count(p, XDPL_V_PASS);
	}
	if (old + 1 > XDPL_FLOOR_WINDOW_LIMIT)
		return xdpl_floor_count(p, XDPL_V_DROP);
	__sync_val_compare_and_swap(&st->a, old, old + 1);
	return xdpl_floor_count(p, XDPL_V_PASS);
}

/* A sliding window: the two windows' counters of limiters.h in the entry
 * (no room for the window's index beside them: one division finds it),
 * the previous window's share in 64 ns units compared by multiplying. */
static __always_inline int xdpl_floor_admitted_sw(struct xdpl_pkt *p)
{
	struct xdpl_state *st = xdpl_floor_known(p);

	if (!st)
		return xdpl_floor_count(p, XDPL_V_PASS);
	__u64 now = xdpl_coarse_ns();
	__u64 idx = now / XDPL_FLOOR_WINDOW_NS;
	__u64 el = now - idx * XDPL_FLOOR_WINDOW_NS;
	__u64 seq = idx & XDPL_WIN_SEQ_MASK;
	__u64 *cur = (idx & 1) ? &st->b : &st->a;
	__u64 cw = *cur, pw = *((idx & 1) ? &st->a : &st->b);
	__u64 ccnt = xdpl_win_seq(cw) == seq ? xdpl_win_count(cw) : 0;
	__u64 pcnt = xdpl_win_seq(pw) == ((idx - 1) & XDPL_WIN_SEQ_MASK) ? xdpl_win_count(pw) : 0;

	if (pcnt * ((XDPL_FLOOR_WINDOW_NS - el) >> 6) >=
	    (XDPL_FLOOR_WINDOW_LIMIT - ccnt) * (XDPL_FLOOR_WINDOW_NS >> 6))
		return xdpl_floor_count(p, XDPL_V_DROP);
	__sync_val_compare_and_swap(cur, cw, seq << XDPL_WIN_COUNT_BITS | (ccnt + 1));
	return xdpl_floor_count(p, XDPL_V_PASS);
}

/* The insert counted as the product counts it (table4.h), so that the
 * benchmark's report shows that every packet paid for one. */
static __always_inline int xdpl_floor_inserted(struct xdpl_pkt *p)
{
	if (p->family != 4)
		return XDP_PASS;
	xdpl_insert4(xdpl_key4_word(1, p->saddr[0]));
	return xdpl_floor_count(p, XDPL_V_PASS);
}

static __always_inline int xdpl_floor_untracked(struct xdpl_pkt *p)
{
	__u64 h = xdpl_set4_hash(xdpl_key4_word(1, p->saddr[0]));
	__u32 idx = xdpl_sketch_line_of(h);
	struct xdpl_sketch_line *ln = bpf_map_lookup_elem(&xdpl_sketch_map, &idx);

	if (!ln)
		return XDP_PASS;
	ln->c[(h >> XDPL_SKETCH_CELL_SHIFT) & (XDPL_SKETCH_LINE_CELLS - 1)]++;
	return xdpl_floor_count(p, XDPL_V_PASS);
}

/* The floor asked for, as a global function verified on its own, where
 * the parser alone would drop the packet (bench.h, xdpl_bench): any code
 * of the floor's inside xdpl_main's stages moved the compiler's spills in
 * the parser there, and 6.1's verifier lost a bound of the IPv6 walk (the
 * trap account.h's xdpl_rule_count names). The call costs the floor a few
 * instructions, which only raise it. */
__attribute__((noinline)) int xdpl_floor(struct xdpl_pkt *p)
{
	if (!p)
		return XDP_PASS;
	if (xdpl_bench_floor == XDPL_FLOOR_REFUSED)
		return xdpl_floor_refused(p);
	if (xdpl_bench_floor == XDPL_FLOOR_GLOBAL)
		return xdpl_floor_global(p);
	if (xdpl_bench_floor == XDPL_FLOOR_INSERTED)
		return xdpl_floor_inserted(p);
	if (xdpl_bench_floor == XDPL_FLOOR_UNTRACKED)
		return xdpl_floor_untracked(p);
	if (xdpl_bench_floor == XDPL_FLOOR_ADMITTED_FW)
		return xdpl_floor_admitted_fw(p);
	if (xdpl_bench_floor == XDPL_FLOOR_ADMITTED_SW)
		return xdpl_floor_admitted_sw(p);
	return xdpl_floor_admitted(p);
}

/* The action of a packet the parser returned r for, in xdpl_bench: its
 * floor's verdict when a floor is asked for, else XDP_DROP (the parser
 * alone); a frame not parsed passes. */
#define XDPL_BENCH_FLOOR(p, r)                                                                     \
	(xdpl_bench_floor ? ((r) == XDPL_PARSE_OK ? xdpl_floor(p) : XDP_PASS) : XDP_DROP)
#else
#define XDPL_BENCH_FLOOR(p, r) ((void)(r), XDP_DROP)
#endif

#endif
