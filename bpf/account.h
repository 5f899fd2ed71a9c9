/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The packet's judgement, and the one step that finishes it: the verdict
 * counted (a rule's counters, or a global one), a drop sampled for top and
 * the drop log, the decision recorded when asked, the XDP action. */
#ifndef XDPLIMIT_ACCOUNT_H
#define XDPLIMIT_ACCOUNT_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "xdplimit_maps.h"
#include "counters.h"
#include "state.h"
#include "hash.h"

/* Record every packet's decision in xdpl_last (pcap replay): a load-time
 * knob, set from Go before load; the verifier prunes the record when 0. */
volatile const __u32 xdpl_record = 0;

/* What the stage that decided a packet found. */
struct xdpl_judgement {
	__u32 why;     /* XDPL_WHY_*: the stage, and for a rule its counters */
	__u32 verdict; /* XDPL_V_* */
	__u32 counter; /* the global counter (XDPL_C_*) when why is not RULE */
	__u32 slot;    /* the rule's counter slot; the sample's slot for DENY and BAN */
	__u32 origin;  /* the refusing level's origin, or XDPL_SAMPLE_NO_LEVEL */
	__s32 rk;      /* the rule's key in xdpl_rules, or -1 */
	__s32 refused; /* the refusing level's index in the rule, or -1 */
};

/* What a stage answers: it decided (the judgement is filled), or the next
 * stage judges; or a map lookup that never fails did, and the packet
 * passes uncounted. */
enum xdpl_stage {
	XDPL_GO_ON = 0,
	XDPL_JUDGED = 1,
	XDPL_GIVE_UP = 2,
};

/* A judgement without a rule, counted in the global counter `counter`;
 * sample_slot names the sample of a drop (the deny list's or the bans'). */
static __always_inline int xdpl_judged(struct xdpl_judgement *j, __u32 why, __u32 verdict,
				       __u32 counter, __u32 sample_slot)
{
	j->why = why;
	j->verdict = verdict;
	j->counter = counter;
	j->slot = sample_slot;
	j->origin = XDPL_SAMPLE_NO_LEVEL;
	j->rk = -1;
	j->refused = -1;
	return XDPL_JUDGED;
}

/* Each CPU's region of xdpl_drop_samples holds this + 1 samples (a power
 * of two), set at load from the map's size. */
volatile const __u32 xdpl_drop_ring_mask = XDPL_DROP_RING_MIN - 1;

/* Sample one in (mask + 1) drops into this CPU's ring of xdpl_drop_samples, read by
 * top and the drop log; mask is the generation's sample_mask, level the refusing
 * level's origin (XDPL_SAMPLE_NO_LEVEL for the deny list and bans). */
static __always_inline void xdpl_sample(struct xdpl_pkt *p, __u32 verdict, __u32 slot, __u32 level,
					__u32 mask)
{
	__u32 zero = 0;
	/* A per-CPU array lookup is inlined by the verifier: cheaper on the
	 * drop path than a helper call for randomness. */
	struct xdpl_drop_ring *ring = bpf_map_lookup_elem(&xdpl_drops, &zero);

	if (!ring)
		return;
	/* Seeded per CPU from Go: which drops are sampled cannot be
	 * predicted, so rotating sources in step does not dodge it. */
	__u32 x = xdpl_xorshift32(ring->rng);

	ring->rng = x;
	if ((x & mask) != 0)
		return;
	/* Only a sampled drop pays for the CPU's number (a helper call before
	 * 6.10's inlining on x86). */
	__u64 written = ring->written;
	__u32 i = bpf_get_smp_processor_id() * (xdpl_drop_ring_mask + 1) +
		  (written & xdpl_drop_ring_mask);
	struct xdpl_drop_sample *d = bpf_map_lookup_elem(&xdpl_drop_samples, &i);

	if (!d)
		return;

	/* The reader (maps/dropring.go) reads the sample through its own mmap on
	 * another CPU, while this CPU may overwrite it. On a weakly ordered CPU
	 * (arm64) plain stores become visible to other CPUs in any order, so
	 * the sample is published as a seqlock: seq is cleared before the
	 * fields are written and set to the ring's index + 1 after. Both are
	 * atomic exchanges: before 6.15's store-release, BPF's fetching
	 * atomics are its only stores with an order. x86's xchg is a full
	 * barrier; the arm64 JIT (arch/arm64/net/bpf_jit_comp.c,
	 * emit_lse_atomic and emit_ll_sc_atomic) emits BPF_XCHG as SWPAL, or
	 * without LSE as LDXR/STLXR then DMB ISH: the kernel's own fully
	 * ordered xchg, a full barrier on both sides. So the clear is visible
	 * before any new field, and every field before the new seq. A plain
	 * store, or a BPF_ADD whose result is unused (STADD, or LDXR/STXR: no
	 * order), would not do. */
	__sync_lock_test_and_set(&d->seq, 0);
	__builtin_memcpy(d->saddr, p->saddr, sizeof(d->saddr));
	__builtin_memcpy(d->daddr, p->daddr, sizeof(d->daddr));
	d->len = p->len;
	d->family = p->family;
	d->verdict = verdict;
	d->slot = slot;
	d->sport = p->sport;
	d->dport = p->dport;
	d->iplen = p->iplen;
	d->proto = p->proto;
	d->ttl = p->ttl;
	d->level = level;
	d->ports = p->ports;
	d->tcp_flags = p->tcp_flags;
	d->tos = p->tos;
	__sync_lock_test_and_set(&d->seq, written + 1);
	/* Only this CPU writes its head; readers take it as how far to look,
	 * and trust only seq. */
	ring->written = written + 1;
}

/* Counts a rule's packet under its verdict. A counter picked by constant
 * offsets, not st->v[verdict]: 6.1's verifier loses the bound of an index
 * the compiler spills and reloads between its check and its use (it
 * rejected the program once bans, sliding_log and the signature fields
 * added register pressure), and clang would otherwise fold the choice back
 * into that index (the empty asm). */
static __always_inline void xdpl_rule_count(struct xdpl_rule_stats *st, __u32 verdict, __u32 len)
{
	struct xdpl_counter *c = &st->v[XDPL_V_PASS];

	if (verdict == XDPL_V_DROP)
		c = &st->v[XDPL_V_DROP];
	else if (verdict == XDPL_V_SHADOW)
		c = &st->v[XDPL_V_SHADOW];
	else if (verdict == XDPL_V_COOKIE)
		c = &st->v[XDPL_V_COOKIE];
	else if (verdict == XDPL_V_REJECT)
		c = &st->v[XDPL_V_REJECT];
	asm volatile("" : "+r"(c));
	c->packets++;
	c->bytes += len;
}

/* Records the packet's decision in xdpl_last; rk is the rule's key in
 * xdpl_rules (generation * XDPL_MAX_RULES + index), or -1 without a rule.
 * A global function, verified once on its own: inlined at each of the
 * program's exits, it took 6.1's verifier past its 1M instructions when
 * recording was on (tests and replay). The rule is looked up again here
 * because a global function takes scalars and stack memory. */
__attribute__((noinline)) int xdpl_record_decision(struct xdpl_pkt *p, __u32 why, __u32 verdict,
						   __s32 rk, __s32 refused)
{
	__u32 zero = 0;
	struct xdpl_decision *d = bpf_map_lookup_elem(&xdpl_last, &zero);

	if (!d || !p)
		return 0;
	d->why = why;
	d->verdict = verdict;
	d->rule = rk < 0 ? -1 : (rk & (XDPL_MAX_RULES - 1));
	d->level = -1;
	d->pkt = *p;
	__builtin_memset(&d->key, 0, sizeof(d->key));
	if (rk < 0)
		return 0;
	__u32 key = rk;
	struct xdpl_rule *r = bpf_map_lookup_elem(&xdpl_rules, &key);

	if (!r)
		return 0;
	int li = refused >= 0 ? refused : 0;

	if (li < XDPL_MAX_LEVELS) {
		struct xdpl_level *l = &r->levels[li];

		xdpl_key_of(l, p, &d->key);
		if (refused >= 0)
			d->level = l->origin;
	}
	return 0;
}

/* The accounting step: counts judgement j of packet p, samples it when it
 * is a drop (or would be one, in shadow, or a packet answered)
 * that a rule, the deny list, a ban or a cookie check decided, with the
 * generation's sample_mask, records it when asked, and returns the XDP
 * action: a SYN answered with a cookie and a packet answered by a reject
 * rule go back out (their answer is already in the frame). */
static __always_inline int xdpl_account(struct xdpl_pkt *p, __u32 sample_mask,
					struct xdpl_judgement *j)
{
	if (j->why == XDPL_WHY_RULE) {
		struct xdpl_rule_stats *st = bpf_map_lookup_elem(&xdpl_stats, &j->slot);

		if (st) {
			xdpl_rule_count(st, j->verdict, p->len);
			if (j->refused >= 0)
				st->level_drops[j->origin & (XDPL_MAX_LEVELS - 1)]++;
		}
	} else {
		xdpl_count(j->counter, p->len);
	}
	/* An unparsed frame's drop is not sampled: no rule or list saw it. */
	if (j->verdict != XDPL_V_PASS && j->why != XDPL_WHY_MALFORMED)
		xdpl_sample(p, j->verdict, j->slot, j->origin, sample_mask);
	if (xdpl_record)
		xdpl_record_decision(p, j->why, j->verdict, j->rk, j->refused);
	if (j->verdict == XDPL_V_COOKIE || j->verdict == XDPL_V_REJECT)
		return XDP_TX;
	return j->verdict == XDPL_V_DROP ? XDP_DROP : XDP_PASS;
}

#endif
