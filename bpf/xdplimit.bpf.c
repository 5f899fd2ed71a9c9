// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/* xdplimit: per-source flood limiter at the driver level.
 *
 * Per packet: parse; the flow cache (flows.h: a flow its rule refuses is
 * dropped here); allow/deny by longest prefix; bans (bans.h); find the
 * first matching rule by bitmap classification; evaluate the rule's limiter
 * levels on state shared across CPUs; count the verdict in per-CPU counters.
 * A rule with action ban bans the source of the packet that exceeded. */

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "xdplimit_consts.h"
#include "xdplimit_structs.h"
#include "xdplimit_maps.h"
#include "parsing.h"
#include "classify.h"
#include "counters.h"
#include "levels.h"
#include "flows.h"
#include "bans.h"
#include "unparsed.h"
#include "csum.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Referenced so that bpf2go finds the types in BTF and emits Go for them. */
const enum xdpl_const *xdpl_unused_const __attribute__((unused));
const struct xdpl_name *xdpl_unused_name __attribute__((unused));
const struct xdpl_metadata *xdpl_unused_meta __attribute__((unused));
const struct xdpl_drop_ring *xdpl_unused_ring __attribute__((unused));
const struct xdpl_decision *xdpl_unused_decision __attribute__((unused));

/* Load-time knobs, set from Go before load; the verifier prunes what they
 * turn off. */
/* Benchmarks: rewrite the IPv4 source of each test-run buffer to the next
 * step of a full-period walk over xdpl_bench_base + [0, N) (N a power of
 * two), so that the re-run buffer is a new source each time. 0 = off. */
volatile const __u32 xdpl_bench_rotate = 0;
volatile const __be32 xdpl_bench_base = 0;
/* Benchmarks: parse, then drop: what the parser alone costs, the floor
 * under every verdict. 0 = off. */
volatile const __u32 xdpl_bench_parse_only = 0;
/* Record every packet's decision in xdpl_last (pcap replay). */
volatile const __u32 xdpl_record = 0;

static __always_inline void xdpl_bench_next_source(void *data, void *data_end)
{
	struct ethhdr *eth = data;
	struct iphdr *iph = (void *)(eth + 1);

	if ((void *)(iph + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return;
	__u32 base = bpf_ntohl(xdpl_bench_base);
	__u32 x = bpf_ntohl(iph->saddr) - base;

	/* An LCG modulo a power of two with a = 1 (mod 4) and odd c has full
	 * period: every source once per N packets, in scrambled order. */
	x = (x * 1103515245u + 12345u) & (xdpl_bench_rotate - 1);
	__be32 next = bpf_htonl(base + x);

	/* The parser checks the header checksum, as the stack does. */
	iph->check = csum_replace4(iph->check, iph->saddr, next);
	iph->saddr = next;
}

/* Sample one in (mask + 1) drops into xdpl_drops, read by top and the drop
 * log; mask is the generation's sample_mask, level the refusing level's
 * origin (XDPL_SAMPLE_NO_LEVEL for the deny list and bans). */
static __always_inline void xdpl_sample(struct xdpl_pkt *p, __u32 verdict, __u32 slot, __u32 level,
					__u32 mask)
{
	__u32 zero = 0;
	/* A per-CPU array lookup is inlined by the verifier: cheaper on the
	 * drop path than a helper call for randomness. */
	struct xdpl_drop_ring *ring = bpf_map_lookup_elem(&xdpl_drops, &zero);

	if (!ring)
		return;
	/* xorshift32, seeded per CPU from Go: which drops are sampled cannot
	 * be predicted, so rotating sources in step does not dodge it. */
	__u32 x = ring->rng;

	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	ring->rng = x;
	if ((x & mask) != 0)
		return;
	struct xdpl_drop_sample *d = &ring->s[ring->written & (XDPL_DROP_RING - 1)];

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
	ring->written++;
}

/* Counts a rule's packet under its verdict. A counter picked by constant
 * offsets, not st->v[verdict]: 6.1's verifier loses the bound of an index
 * the compiler spills and reloads between its check and its use (it
 * rejected the program once this round's features added register
 * pressure), and clang would otherwise fold the choice back into that
 * index (the empty asm). */
static __always_inline void xdpl_rule_count(struct xdpl_rule_stats *st, __u32 verdict, __u32 len)
{
	struct xdpl_counter *c = &st->v[XDPL_V_PASS];

	if (verdict == XDPL_V_DROP)
		c = &st->v[XDPL_V_DROP];
	else if (verdict == XDPL_V_SHADOW)
		c = &st->v[XDPL_V_SHADOW];
	asm volatile("" : "+r"(c));
	c->packets++;
	c->bytes += len;
}

/* Records the packet's decision in xdpl_last; rk is the rule's key in
 * xdpl_rules (generation * XDPL_MAX_RULES + index), or -1 without a rule.
 * A global function, verified once on its own: inlined at each of the
 * program's ten exits, it took 6.1's verifier past its 1M instructions when
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

static __always_inline void xdpl_decided(__u32 why, __u32 verdict, __s32 rk, int refused,
					 struct xdpl_pkt *p)
{
	if (xdpl_record)
		xdpl_record_decision(p, why, verdict, rk, refused);
}

/* A packet the deny list or a ban refuses: counted (c_drop, or c_shadow
 * when shadow), sampled and recorded under why. Returns the XDP action. */
static __always_inline int xdpl_refuse_listed(struct xdpl_pkt *p, struct xdpl_gen_cfg *g,
					      int shadow, __u32 c_drop, __u32 c_shadow,
					      __u32 sample_slot, __u32 why)
{
	__u32 v = shadow ? XDPL_V_SHADOW : XDPL_V_DROP;

	xdpl_count(shadow ? c_shadow : c_drop, p->len);
	xdpl_sample(p, v, sample_slot, XDPL_SAMPLE_NO_LEVEL, g->sample_mask);
	xdpl_decided(why, v, -1, -1, p);
	return shadow ? XDP_PASS : XDP_DROP;
}

SEC("xdp")
int xdpl_main(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 zero = 0;
	/* The parsed packet lives in a per-CPU map value, not on the stack:
	 * the verifier reads map memory as unknown values, where the
	 * parser's paths left different constants in a stack copy, and it
	 * then walked the rest of the program once per parser path (~800k
	 * of its 1M instructions with the stack copy, ~200k without). */
	struct xdpl_pkt *p = bpf_map_lookup_elem(&xdpl_pkt_scratch, &zero);

	if (!p)
		return XDP_PASS;
	if (xdpl_bench_rotate)
		xdpl_bench_next_source(data, data_end);
	int pr = xdpl_parse_counted(ctx, p);

	if (xdpl_bench_parse_only)
		return XDP_DROP;
	if (pr == XDPL_PARSE_NOT_IP) {
		xdpl_count(XDPL_C_NON_IP, p->len);
		xdpl_decided(XDPL_WHY_NON_IP, XDPL_V_PASS, -1, -1, p);
		return XDP_PASS;
	}
	if (pr != XDPL_PARSE_OK) {
		__u32 v = xdpl_unparsed(p);

		xdpl_count(XDPL_C_MALFORMED, p->len);
		xdpl_decided(XDPL_WHY_MALFORMED, v, -1, -1, p);
		return v == XDPL_V_DROP ? XDP_DROP : XDP_PASS;
	}

	struct xdpl_control *ctl = bpf_map_lookup_elem(&xdpl_ctl, &zero);

	if (!ctl)
		return XDP_PASS;
	/* Read once: the whole packet is judged by one generation. */
	__u32 gen = ctl->active & 1;
	struct xdpl_gen_cfg *g = &ctl->gen[gen];
	__u32 gflags = g->flags;
	/* The ban epoch before the ban table and the rules' state: a ban
	 * added, or a fleet window lowered, after this read voids what this
	 * packet teaches the flow cache. Without either kind no ban counts
	 * and no window is lowered (turning the ban lookup on changes the
	 * generation). */
	struct xdpl_flow_tag tag = {.seq = g->seq, .gen = gen};

	if (gflags & (XDPL_GF_BANS | XDPL_GF_FLEET_WINDOWS)) {
		struct xdpl_ban_epoch *ep = xdpl_ban_epoch_ptr();

		if (!ep)
			return XDP_PASS;
		tag.epoch = xdpl_ban_epoch_of(ep);
	}
	__u32 verdict, slot, origin;
	__s32 rk;
	int refused;
	struct xdpl_flow *f = xdpl_flow_hit(p, g, &tag, 0, &refused, &origin);

	if (f) {
		verdict = f->verdict;
		slot = f->slot;
		rk = f->rk;
		goto judged;
	}

	if (gflags & XDPL_GF_ACL) {
		__u32 acl = xdpl_acl(gen, gflags, p);

		if (acl == XDPL_ACL_ALLOW) {
			xdpl_count(XDPL_C_ALLOW, p->len);
			xdpl_decided(XDPL_WHY_ALLOW, XDPL_V_PASS, -1, -1, p);
			return XDP_PASS;
		}
		if (acl == XDPL_ACL_DENY)
			return xdpl_refuse_listed(p, g, gflags & XDPL_GF_SHADOW, XDPL_C_DENY,
						  XDPL_C_DENY_SHADOW, XDPL_SAMPLE_DENY,
						  XDPL_WHY_DENY);
	}

	/* Allow wins over a ban; a banned source costs no rule. A ban in
	 * shadow (started by a rule in shadow) is counted and then the rules
	 * judge the packet as if it were not there: it must not let through
	 * what another rule drops. */
	if (gflags & XDPL_GF_BANS) {
		struct xdpl_ban *b = xdpl_banned(p);

		if (b) {
			__sync_fetch_and_add(&b->dropped, 1);
			if (!(b->flags & XDPL_BF_SHADOW) || (gflags & XDPL_GF_SHADOW))
				return xdpl_refuse_listed(p, g, gflags & XDPL_GF_SHADOW,
							  XDPL_C_BAN_DROP, XDPL_C_BAN_SHADOW,
							  XDPL_SAMPLE_BAN, XDPL_WHY_BAN);
			xdpl_count(XDPL_C_BAN_SHADOW, p->len);
			xdpl_sample(p, XDPL_V_SHADOW, XDPL_SAMPLE_BAN, XDPL_SAMPLE_NO_LEVEL,
				    g->sample_mask);
			/* Nothing the rules decide for this packet goes to the
			 * flow cache (xdpl_flow_note learns nothing under seq
			 * 0): a hit there comes before the ban table, and would
			 * skip this count for the source's next packets. */
			tag.seq = 0;
		}
	}

	/* A global first level's refusal, whatever the source (flows.h). */
	if (gflags & XDPL_GF_NO_SOURCE_FLOWS) {
		f = xdpl_flow_hit(p, g, &tag, 1, &refused, &origin);
		if (f) {
			verdict = f->verdict;
			slot = f->slot;
			rk = f->rk;
			goto judged;
		}
	}

	int idx = xdpl_classify(gen, g, p);

	if (idx < 0) {
		xdpl_count(XDPL_C_UNMATCHED, p->len);
		xdpl_decided(XDPL_WHY_UNMATCHED, XDPL_V_PASS, -1, -1, p);
		return XDP_PASS;
	}
	rk = gen * XDPL_MAX_RULES + idx;
	struct xdpl_rule *r = bpf_map_lookup_elem(&xdpl_rules, &rk);

	if (!r)
		return XDP_PASS;

	refused = xdpl_limit(r, p, &tag.repeat);
	verdict = XDPL_V_PASS;
	origin = XDPL_SAMPLE_NO_LEVEL;
	if (refused >= 0) {
		verdict = ((r->flags & XDPL_RF_SHADOW) || (gflags & XDPL_GF_SHADOW)) ? XDPL_V_SHADOW
										     : XDPL_V_DROP;
		if (refused < XDPL_MAX_LEVELS)
			origin = r->levels[refused].origin;
	}
	slot = r->counter_slot;
	if (refused >= 0 && (r->flags & XDPL_RF_BAN))
		xdpl_ban_start(p, p->family == 4 ? r->ban_bits4 : r->ban_bits6, r->ban_ns,
			       r->counter_slot, verdict == XDPL_V_SHADOW);
	else if (refused >= 0 && tag.repeat)
		xdpl_flow_note(p, &tag, rk, verdict);

judged:;
	struct xdpl_rule_stats *st = bpf_map_lookup_elem(&xdpl_stats, &slot);

	if (st) {
		xdpl_rule_count(st, verdict, p->len);
		if (refused >= 0)
			st->level_drops[origin & (XDPL_MAX_LEVELS - 1)]++;
	}
	if (verdict != XDPL_V_PASS)
		xdpl_sample(p, verdict, slot, origin, g->sample_mask);
	xdpl_decided(XDPL_WHY_RULE, verdict, rk, refused, p);
	return verdict == XDPL_V_DROP ? XDP_DROP : XDP_PASS;
}
