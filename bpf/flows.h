/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The per-CPU flow cache: a known source over its limit dropped right after
 * parsing. The refused-until cache (refused.h) is keyed by a level's key, so
 * a packet reaches it only after the allow/deny lists, the ban table, the
 * classifier and the rule; this one is keyed by the packet itself, by the
 * fields the generation's rules and the cached levels' keys read (the
 * generation's sig_mask, from the control plane): two packets equal under
 * the mask get the same rule and the same key at the cached level, so the
 * same verdict while that level refuses the key. A flood that varies a
 * field nothing reads (the source port of a SYN flood against
 * destination-port rules) stays one flow.
 *
 * Exact, as the refused-until cache is: an entry is a copy of the
 * refused-until entry that just refused the packet at the cached level
 * (same until, same sketch mark epoch), and holds only while
 * - the generation is the one it was learned under (seq: a reload of the
 *   rules, the allow/deny lists or the mode voids every entry), and
 * - no ban was added since (the ban epoch): bans answer before the rules;
 *   a fleet sync that lowers a fixed window's count moves it too.
 * Cached: refusals by a rule's first level, and by the second level of a
 * rule whose first is a global aggregate (a per-source limit behind a
 * global one, the compiler's order). For the latter a hit first checks the
 * global level as phase one would (reading only), and names it as the
 * refusing level when it refuses too: the verdict is the same either way,
 * and so are the counters. Other later levels are not cached: every level
 * before them would have to be checked. Not cached either: rules that ban
 * (their refusal starts a ban), packets a shadow ban counted (that count
 * comes first), and whatever the refused-until cache leaves out (byte
 * costs).
 *
 * Keyed without the source: a rule whose first level is global refuses
 * every packet it matches while that level refuses, whatever the source.
 * When no rule of the generation matches on the source address
 * (XDPL_GF_NO_SOURCE_FLOWS), such a refusal is also copied under the
 * packet's key with the source masked out (level XDPL_FLOW_NO_SOURCE), and
 * looked up after the allow/deny lists and the bans, which depend on the
 * source: a spoofed flood that a global level refuses is then one flow
 * instead of one full walk per packet. Where the generation has no lists,
 * no bans and no cookie checks, it is looked up first, before the entries
 * keyed with the source: for a packet that both hold, the one keyed with
 * the source is a per-source level behind the same global level, and its
 * hit names that global level when it refuses; the verdict and the counts
 * are the same either way. */
#ifndef XDPLIMIT_FLOWS_H
#define XDPLIMIT_FLOWS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "xdplimit_maps.h"
#include "clock.h"
#include "counters.h"
#include "refused.h"
#include "levels.h"

/* The packet as 64-bit words, masked and compared word by word, up to
 * the payload's place: no generation with payload matches learns or hits
 * flow cache entries (xdpl_generation), and no other reads it. */
#define XDPL_SIG_WORDS (__builtin_offsetof(struct xdpl_pkt, payload) / 8)
_Static_assert(__builtin_offsetof(struct xdpl_pkt, payload) % 8 == 0,
	       "xdpl_pkt is read as 64-bit words");
_Static_assert(__builtin_offsetof(struct xdpl_pkt, saddr) == 20,
	       "the source address is word 2's upper half, word 3 and word 4's lower half");

/* struct xdpl_flow's level beyond the refusing level's index (0 or 1, keyed
 * with the source): level 0, a global one, keyed without the source. */
#define XDPL_FLOW_NO_SOURCE 2

/* Word i of the generation's mask m; without the source address when
 * nosrc (i is a constant where it is inlined). */
static __always_inline __u64 xdpl_sig_mask_word(__u64 *m, int i, int nosrc)
{
	if (nosrc && i == 2)
		return m[2] & 0xffffffffULL;
	if (nosrc && i == 3)
		return 0;
	if (nosrc && i == 4)
		return m[4] & 0xffffffff00000000ULL;
	return m[i];
}

/* The slot of the packet p under mask m, and its tag: a multiplicative
 * hash of the source address (the protocol instead when nosrc) and the
 * ports the mask keeps, read at the widths of the fields (the hash of the
 * whole masked packet as words cost a hit 7 ns more when the parser stored
 * the fields one by one); the slot from its top bits, the tag from the 32
 * below them, never 0 (a slot never written). Packets that differ only in
 * other fields share a slot; the comparison (xdpl_flow_hit) is of every
 * masked field, so a collision only replaces an entry (a lost hit).
 *
 * A probe reads the slot's tag first (struct xdpl_scratch), and the slot
 * only when the tags agree: a forged source's packet hashes to a random
 * slot of 96 KiB, a cache miss that drew a quarter of the forged path's
 * samples (docs/internals/nanoseconds.md), where the tags are 4 KiB that
 * stay in the cache. The tag is of the same hash as the slot, so a packet
 * whose tag differs cannot equal the slot's entry under the mask. */
struct xdpl_flow_pos {
	__u32 idx;
	__u32 tag;
};

static __always_inline struct xdpl_flow_pos xdpl_flow_pos(struct xdpl_pkt *p, struct xdpl_pkt *m,
							  int nosrc)
{
	__u32 a =
	    nosrc ? 0x5a5a0000 | p->proto : p->saddr[0] ^ p->saddr[1] ^ p->saddr[2] ^ p->saddr[3];
	__u32 ports = (__u32)(p->sport & m->sport) << 16 | (p->dport & m->dport);
	__u64 h = ((__u64)a << 32 | ports) * 0x9e3779b97f4a7c15ULL;

	return (struct xdpl_flow_pos){.idx = h >> (64 - XDPL_FLOW_BITS),
				      .tag = (__u32)(h >> (32 - XDPL_FLOW_BITS)) | 1};
}

/* The entry that refuses packet p now, or NULL; *level and *origin are
 * then the refusing level's index and origin. g is the generation the
 * packet is judged by, tag what xdpl_main read of it and of the bans.
 * nosrc (a constant): the entries keyed without the source. */
static __always_inline struct xdpl_flow *xdpl_flow_hit(struct xdpl_scratch *sc,
						       struct xdpl_gen_cfg *g,
						       struct xdpl_flow_tag *tag, int nosrc,
						       int *level, __u32 *origin)
{
	struct xdpl_pkt *p = &sc->pkt;

	/* No test of tag->seq here: a branch on it would split every later
	 * state of the verifier in two. An entry with seq 0 (never written)
	 * has until 0 and cannot hit. */
	if (!xdpl_refused_on)
		return NULL;
	struct xdpl_flow_pos pos = xdpl_flow_pos(p, &g->sig_mask, nosrc);

	if (sc->flow_tags[pos.idx & ((1 << XDPL_FLOW_BITS) - 1)] != pos.tag)
		return NULL;
	struct xdpl_flow *e = bpf_map_lookup_elem(&xdpl_flows, &pos.idx);

	if (!e || e->seq != tag->seq || e->epoch != tag->epoch ||
	    (nosrc ? e->level != XDPL_FLOW_NO_SOURCE : e->level >= XDPL_FLOW_NO_SOURCE))
		return NULL;
	__u64 *pw = (__u64 *)p, *mw = (__u64 *)&g->sig_mask, *sw = (__u64 *)&e->sig;
	__u64 diff = 0;

#pragma unroll
	for (int i = 0; i < XDPL_SIG_WORDS; i++)
		diff |= (pw[i] & xdpl_sig_mask_word(mw, i, nosrc)) ^ sw[i];
	if (diff)
		return NULL;
	/* The clock only for a packet of the entry's flow, and its own: a
	 * fine reading cached for some packets only would split the
	 * verifier's states after a miss. */
	struct xdpl_clk clk;

	xdpl_clk_start(&clk);
	__u64 now = xdpl_now(&clk, e->lflags);

	if (now >= e->until || now < e->from ||
	    (now >> XDPL_SKETCH_MARK_SHIFT) != (e->from >> XDPL_SKETCH_MARK_SHIFT))
		return NULL;
	*level = 0;
	*origin = e->origin;
	if (!nosrc && e->level) {
		/* Behind a global level: phase one checks it first. */
		__u32 rk = e->rk;
		struct xdpl_rule *r = bpf_map_lookup_elem(&xdpl_rules, &rk);

		if (!r)
			return NULL;
		struct xdpl_level *lg = &r->levels[0];
		__u64 costg = (lg->flags & XDPL_LF_BYTES) ? p->len : 1;

		__u32 hit = 0;

		if (xdpl_global_level(xdpl_global(lg), lg, p, xdpl_now(&clk, lg->flags), costg, 0,
				      &hit))
			*level = 1;
		else
			*origin = lg->origin;
	}
	xdpl_count(XDPL_C_FLOW_CACHED, 0);
	return e;
}

/* After level tag->repeat - 1 of rule rk (key rk in xdpl_rules) refused
 * packet p with verdict from the refused-until cache (xdpl_limit's repeat:
 * a key refused before, not a spoofed source seen once), or its global
 * first level did (XDPL_REPEAT_GLOBAL): copies that cache's entry for the
 * level's key into the flow cache, tagged with tag, keyed without the
 * source in the second case.
 * A global function, verified once on its own and called about once per
 * flow and mark epoch, not per packet. */
__attribute__((noinline)) int xdpl_flow_note(struct xdpl_pkt *p, struct xdpl_flow_tag *tag,
					     __u32 rk, __u32 verdict)
{
	__u32 zero = 0;
	struct xdpl_control *ctl = bpf_map_lookup_elem(&xdpl_ctl, &zero);
	struct xdpl_scratch *sc = bpf_map_lookup_elem(&xdpl_scratch, &zero);

	if (!p || !tag || !ctl || !sc || !tag->seq)
		return 0;
	struct xdpl_gen_cfg *g = &ctl->gen[tag->gen & 1];

	/* A reload between the packet's verdict and now: not this generation. */
	if (g->seq != tag->seq)
		return 0;
	struct xdpl_rule *r = bpf_map_lookup_elem(&xdpl_rules, &rk);

	if (!r || r->nlevels == 0)
		return 0;
	struct xdpl_level *l = &r->levels[0];
	__u8 li = 0;

	if (tag->repeat == 2) {
		/* Only behind a global level (what a hit checks). */
		if (r->nlevels != 2 || r->levels[0].key_kind != XDPL_KEY_GLOBAL ||
		    r->levels[1].key_kind == XDPL_KEY_GLOBAL)
			return 0;
		l = &r->levels[1];
		li = 1;
	} else if (tag->repeat == XDPL_REPEAT_GLOBAL) {
		/* Whatever the source: only where no rule reads it. */
		if (!(g->flags & XDPL_GF_NO_SOURCE_FLOWS) || l->key_kind != XDPL_KEY_GLOBAL)
			return 0;
		li = XDPL_FLOW_NO_SOURCE;
	} else if (tag->repeat != 1) {
		return 0;
	}
	struct xdpl_key k;

	xdpl_key_of(l, p, &k);
	struct xdpl_refused *re = xdpl_refused_slot(&k);

	if (!re || !xdpl_key_eq(&re->key, &k) || re->until <= re->from)
		return 0;
	/* A fleet window's entry from before this packet's epoch may have
	 * been lowered since (refused.h). */
	if (xdpl_refused_stamped(l) && re->stamp != tag->epoch)
		return 0;
	int nosrc = li == XDPL_FLOW_NO_SOURCE;
	struct xdpl_flow_pos pos = xdpl_flow_pos(p, &g->sig_mask, nosrc);
	struct xdpl_flow *e = bpf_map_lookup_elem(&xdpl_flows, &pos.idx);

	if (!e)
		return 0;
	__u64 *pw = (__u64 *)p, *mw = (__u64 *)&g->sig_mask, *sw = (__u64 *)&e->sig;

#pragma unroll
	for (int i = 0; i < XDPL_SIG_WORDS; i++)
		sw[i] = pw[i] & xdpl_sig_mask_word(mw, i, nosrc);
	e->from = re->from;
	e->until = re->until;
	e->epoch = tag->epoch;
	e->seq = tag->seq;
	e->rk = rk;
	e->slot = r->counter_slot;
	e->origin = l->origin;
	e->verdict = verdict;
	e->lflags = l->flags;
	e->level = li;
	sc->flow_tags[pos.idx & ((1 << XDPL_FLOW_BITS) - 1)] = pos.tag;
	return 0;
}

#endif
