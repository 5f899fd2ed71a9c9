// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/* xdplimit: per-source flood limiter at the driver level.
 *
 * xdpl_main judges a packet in stages, each of which decides (fills the
 * packet's judgement) or lets the next one go on:
 *   - parse (parsing.h): a frame that is not IP, or that the stack would
 *     drop (unparsed.h), is decided here;
 *   - the flow cache keyed with the source (flows.h): a flow its rule
 *     refuses is dropped before the lists, the bans and the classifier
 *     (in a generation where nothing before the rule reads the source,
 *     the flow cache keyed without it first: xdpl_source_free);
 *   - allow/deny by longest prefix (classify.h), then the bans (bans.h);
 *   - a TCP ACK that may answer a SYN cookie (syncookie.h): one with a
 *     wrong cookie, to a listener, is dropped;
 *   - the conversation checks (conversation.h): TCP without SYN that no
 *     socket owns, UDP to a port without a socket, addressed to this
 *     host, dropped;
 *   - the flow cache keyed without the source, when no rule reads the
 *     source: a global first level's refusal, whatever the source;
 *   - the rule: the first matching rule by bitmap classification
 *     (classify.h), its limiter levels evaluated on state shared across
 *     CPUs (levels.h); a rule with action ban bans the source of the
 *     packet that exceeded it; a rule with action syncookie answers a
 *     refused SYN with a SYN-ACK carrying a cookie (syncookie.h); a rule
 *     with action reject answers a refused packet with a reset or an ICMP
 *     error, within its budgets (reject.h).
 * One accounting step then counts the judgement in per-CPU counters,
 * samples a drop, and records the decision when asked (account.h). The
 * benchmarks' knobs act in a stage of their own, before all others
 * (bench.h); the stage benchmark's build of this file may also end a packet
 * after any stage (XDPL_BENCH_STOP_AFTER), or end it in a floor program
 * after the parser (floor.h). */

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
#include "account.h"
#include "traffic.h"
#include "bench.h"
#include "syncookie.h"
#include "reject.h"
#include "conversation.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Referenced so that bpf2go finds the types in BTF and emits Go for them. */
const enum xdpl_const *xdpl_unused_const __attribute__((unused));
const struct xdpl_name *xdpl_unused_name __attribute__((unused));
const struct xdpl_metadata *xdpl_unused_meta __attribute__((unused));
const struct xdpl_drop_ring *xdpl_unused_ring __attribute__((unused));
const struct xdpl_decision *xdpl_unused_decision __attribute__((unused));

/* Parses the frame into p. Decides a frame that is not IP (passed) or that
 * the parser gave up on (the policy's unparsed action). */
static __always_inline int xdpl_parse_stage(struct xdp_md *ctx, struct xdpl_pkt *p,
					    struct xdpl_judgement *j)
{
	int pr = xdpl_parse_counted(ctx, p);

	if (pr == XDPL_PARSE_OK)
		return XDPL_GO_ON;
	if (pr == XDPL_PARSE_NOT_IP)
		return xdpl_judged(j, XDPL_WHY_NON_IP, XDPL_V_PASS, XDPL_C_NON_IP, 0);
	return xdpl_judged(j, XDPL_WHY_MALFORMED, xdpl_unparsed(p), XDPL_C_MALFORMED, 0);
}

/* The generation the whole packet is judged by, read once (its index in
 * *gen, its flags in *gflags), and the tag an entry this packet teaches the
 * flow cache gets. NULL when a lookup that never fails did. */
static __always_inline struct xdpl_gen_cfg *xdpl_generation(__u32 *gen, __u32 *gflags,
							    struct xdpl_flow_tag *tag)
{
	__u32 zero = 0;
	struct xdpl_control *ctl = bpf_map_lookup_elem(&xdpl_ctl, &zero);

	if (!ctl)
		return NULL;
	*gen = ctl->active & 1;
	struct xdpl_gen_cfg *g = &ctl->gen[*gen];

	*gflags = g->flags;
	*tag = (struct xdpl_flow_tag){.seq = g->seq, .gen = *gen};
	/* The flow cache's signature holds no payload: a generation with
	 * payload matches neither learns nor hits (seq 0, flows.h). */
	if (g->dims & XDPL_DIM_PAYLOAD)
		tag->seq = 0;
	/* The ban epoch before the ban table and the rules' state: a ban
	 * added, or a fleet window lowered, after this read voids what this
	 * packet teaches the flow cache. Without either kind no ban counts
	 * and no window is lowered (turning the ban lookup on changes the
	 * generation). */
	if (*gflags & (XDPL_GF_BANS | XDPL_GF_FLEET_WINDOWS)) {
		struct xdpl_ban_epoch *ep = xdpl_ban_epoch_ptr();

		if (!ep)
			return NULL;
		tag->epoch = xdpl_ban_epoch_of(ep);
	}
	return g;
}

/* Whether nothing before the rule depends on the source in generation
 * flags gflags: no allow/deny list, no ban, no cookie check, and entries
 * keyed without the source (no rule reads it). The flow cache is then
 * looked up without the source first: a forged flood that a global level
 * refuses costs one probe, not a miss keyed with the source and then a hit.
 * Either order gives a packet the same verdict and counts (flows.h). */
static __always_inline int xdpl_source_free(__u32 gflags)
{
	return (gflags & (XDPL_GF_NO_SOURCE_FLOWS | XDPL_GF_ACL | XDPL_GF_BANS |
			  XDPL_GF_SYNCOOKIE)) == XDPL_GF_NO_SOURCE_FLOWS;
}

/* A flow cache lookup (flows.h): keyed with the source right after
 * parsing, without it (nosrc) after the lists and the bans, or first where
 * none (xdpl_source_free). A hit decides the packet as its rule did. */
static __always_inline int xdpl_cached(struct xdpl_scratch *sc, struct xdpl_gen_cfg *g,
				       struct xdpl_flow_tag *tag, int nosrc,
				       struct xdpl_judgement *j)
{
	__u32 origin;
	int level;
	struct xdpl_flow *f = xdpl_flow_hit(sc, g, tag, nosrc, &level, &origin);

	if (!f)
		return XDPL_GO_ON;
	j->refused = level;
	j->origin = origin;
	j->why = XDPL_WHY_RULE;
	j->verdict = f->verdict;
	j->slot = f->slot;
	j->rk = f->rk;
	return XDPL_JUDGED;
}

/* A packet the deny list or a ban refuses: counted under c_drop, or
 * c_shadow when the generation is in shadow, and sampled under
 * sample_slot. */
static __always_inline int xdpl_listed(struct xdpl_judgement *j, __u32 shadow, __u32 why,
				       __u32 c_drop, __u32 c_shadow, __u32 sample_slot)
{
	return xdpl_judged(j, why, shadow ? XDPL_V_SHADOW : XDPL_V_DROP, shadow ? c_shadow : c_drop,
			   sample_slot);
}

/* The allow and deny lists, then the bans. Allow wins over a ban; a banned
 * source costs no rule. A ban in shadow (started by a rule in shadow) is
 * counted, and then the rules judge the packet as if it were not there: it
 * must not let through what another rule drops. */
static __always_inline int xdpl_lists_and_bans(struct xdpl_pkt *p, struct xdpl_gen_cfg *g,
					       __u32 gen, __u32 gflags, struct xdpl_flow_tag *tag,
					       struct xdpl_judgement *j)
{
	__u32 shadow = gflags & XDPL_GF_SHADOW;

	if (gflags & XDPL_GF_ACL) {
		__u32 acl = xdpl_acl(gen, gflags, p);

		if (acl == XDPL_ACL_ALLOW)
			return xdpl_judged(j, XDPL_WHY_ALLOW, XDPL_V_PASS, XDPL_C_ALLOW, 0);
		if (acl == XDPL_ACL_DENY)
			return xdpl_listed(j, shadow, XDPL_WHY_DENY, XDPL_C_DENY,
					   XDPL_C_DENY_SHADOW, XDPL_SAMPLE_DENY);
	}
	if (!(gflags & XDPL_GF_BANS))
		return XDPL_GO_ON;
	struct xdpl_ban *b = xdpl_banned(p);

	if (!b)
		return XDPL_GO_ON;
	__sync_fetch_and_add(&b->dropped, 1);
	if (!(b->flags & XDPL_BF_SHADOW) || shadow)
		return xdpl_listed(j, shadow, XDPL_WHY_BAN, XDPL_C_BAN_DROP, XDPL_C_BAN_SHADOW,
				   XDPL_SAMPLE_BAN);
	xdpl_count(XDPL_C_BAN_SHADOW, p->len);
	xdpl_sample(p, XDPL_V_SHADOW, XDPL_SAMPLE_BAN, XDPL_SAMPLE_NO_LEVEL, g->sample_mask);
	/* Nothing the rules decide for this packet goes to the flow cache
	 * (xdpl_flow_note learns nothing under seq 0): a hit there comes
	 * before the ban table, and would skip this count for the source's
	 * next packets. */
	tag->seq = 0;
	return XDPL_GO_ON;
}

/* The first matching rule, and its levels: admitted, or refused by one of
 * them (dropped, or passed in shadow). A refusal starts the rule's ban, or
 * teaches the flow cache a refusal that repeats (flows.h). */
static __always_inline int xdpl_rule_levels(struct xdp_md *ctx, struct xdpl_pkt *p,
					    struct xdpl_gen_cfg *g, __u32 gen, __u32 gflags,
					    struct xdpl_flow_tag *tag, struct xdpl_judgement *j)
{
	int idx = xdpl_classify(ctx, gen, g, p, 0);

	if (idx < 0)
		return xdpl_judged(j, XDPL_WHY_UNMATCHED, XDPL_V_PASS, XDPL_C_UNMATCHED, 0);
	__s32 rk = gen * XDPL_MAX_RULES + idx;
	struct xdpl_rule *r = bpf_map_lookup_elem(&xdpl_rules, &rk);

	if (!r)
		return XDPL_GIVE_UP;
	int refused = xdpl_limit(r, p, &tag->repeat);
	__u32 verdict = XDPL_V_PASS;
	__u32 origin = XDPL_SAMPLE_NO_LEVEL;

	if (refused >= 0) {
		if ((r->flags & XDPL_RF_SHADOW) || (gflags & XDPL_GF_SHADOW))
			verdict = XDPL_V_SHADOW;
		else
			verdict = (r->flags & XDPL_RF_SYNCOOKIE) ? XDPL_V_COOKIE
				  : (r->flags & XDPL_RF_REJECT)	 ? XDPL_V_REJECT
								 : XDPL_V_DROP;
		if (refused < XDPL_MAX_LEVELS)
			origin = r->levels[refused].origin;
	}
	j->why = XDPL_WHY_RULE;
	j->verdict = verdict;
	j->slot = r->counter_slot;
	j->origin = origin;
	j->rk = rk;
	j->refused = refused;
	if (refused >= 0 && (r->flags & XDPL_RF_BAN))
		xdpl_ban_start(p, p->family == 4 ? r->ban_bits4 : r->ban_bits6, r->ban_ns,
			       r->counter_slot, verdict == XDPL_V_SHADOW);
	else if (refused >= 0 && tag->repeat)
		xdpl_flow_note(p, tag, rk, verdict);
	return XDPL_JUDGED;
}

/* A TCP ACK (no SYN, no RST) that may carry a cookie back, when some rule
 * answers SYNs with cookies: one to a listener with a wrong cookie is
 * dropped, and counted as its rule's; a valid one goes on to be judged as
 * any packet is. */
static __always_inline int xdpl_cookie_acks(struct xdp_md *ctx, struct xdpl_pkt *p, __u32 gen,
					    __u32 gflags, struct xdpl_judgement *j)
{
	if (!xdpl_cookie_acks_on || !(gflags & XDPL_GF_SYNCOOKIE) || p->proto != IPPROTO_TCP ||
	    p->ports != XDPL_PORTS_OK ||
	    (p->tcp_flags & (XDPL_TCP_SYN | XDPL_TCP_ACK | XDPL_TCP_RST)) != XDPL_TCP_ACK)
		return XDPL_GO_ON;
	struct xdpl_cookie_rule cr = {.rk = -1};
	int r = xdpl_cookie_ack(ctx, p, gen, &cr);

	if (r == XDPL_ACK_VALID)
		xdpl_count(XDPL_C_COOKIE_ACK_VALID, p->len);
	if (r != XDPL_ACK_INVALID)
		return XDPL_GO_ON;
	xdpl_judged(j, XDPL_WHY_COOKIE_ACK, XDPL_V_DROP, XDPL_C_COOKIE_ACK_INVALID, cr.slot);
	j->origin = XDPL_SAMPLE_COOKIE_ACK;
	j->rk = cr.rk;
	return XDPL_JUDGED;
}

/* A SYN a cookie rule refused: answered with a SYN-ACK built in the frame,
 * or passed to the stack to keep its listeners accepting cookie ACKs
 * (syncookie.h), or dropped when it is not one to answer. */
static __always_inline void xdpl_cookie_answer(struct xdp_md *ctx, struct xdpl_pkt *p, __u32 gen,
					       struct xdpl_judgement *j)
{
	if (xdpl_cookie_pass_due(p)) {
		j->verdict = XDPL_V_PASS;
		j->refused = -1;
		j->origin = XDPL_SAMPLE_NO_LEVEL;
		xdpl_count(XDPL_C_COOKIE_KEEPALIVE, p->len);
		return;
	}
	if (xdpl_synack(ctx, gen) == 0)
		return;
	j->verdict = XDPL_V_DROP;
	xdpl_count(XDPL_C_COOKIE_UNANSWERED, p->len);
}

/* A packet a reject rule refused: answered with a reset or an ICMP error
 * built in the frame, or, when it may not be or a budget is spent, dropped
 * and counted under the reason, and as its rule's suppressed answer
 * (reject.h). */
static __always_inline void xdpl_reject_answer(struct xdp_md *ctx, struct xdpl_pkt *p, __u32 gen,
					       struct xdpl_judgement *j)
{
	int why = xdpl_reject(ctx, p, gen);

	if (why == XDPL_REJECT_SENT)
		return;
	j->verdict = XDPL_V_DROP;
	xdpl_count(why, p->len);
	struct xdpl_rule_stats *st = bpf_map_lookup_elem(&xdpl_stats, &j->slot);

	if (st)
		st->reject_suppressed++;
}

SEC("xdp")
int xdpl_main(struct xdp_md *ctx)
{
	__u32 zero = 0;
	/* The parsed packet lives in a per-CPU map value, not on the stack:
	 * the verifier reads map memory as unknown values, where the
	 * parser's paths left different constants in a stack copy, and it
	 * then walked the rest of the program once per parser path (~800k
	 * of its 1M instructions with the stack copy, ~200k without). */
	struct xdpl_scratch *sc = bpf_map_lookup_elem(&xdpl_scratch, &zero);
	struct xdpl_gen_cfg *g = NULL;
	struct xdpl_judgement j;
	__u32 gen = 0, gflags = 0;

	if (!sc)
		return XDP_PASS;
	struct xdpl_pkt *p = &sc->pkt;
	struct xdpl_flow_tag *tag = &sc->tag;

	int b = xdpl_bench(ctx, p);

	if (b != XDPL_BENCH_GO_ON)
		return b;
	int s = xdpl_parse_stage(ctx, p, &j);

	if (s == XDPL_GO_ON) {
		g = xdpl_generation(&gen, &gflags, tag);
		if (!g)
			return XDP_PASS;
		if (xdpl_source_free(gflags))
			s = xdpl_cached(sc, g, tag, 1, &j);
		if (s == XDPL_GO_ON)
			s = xdpl_cached(sc, g, tag, 0, &j);
	}
	XDPL_BENCH_STOP_AFTER(XDPL_STOP_FLOWS);
	if (s == XDPL_GO_ON)
		s = xdpl_lists_and_bans(p, g, gen, gflags, tag, &j);
	XDPL_BENCH_STOP_AFTER(XDPL_STOP_LISTS);
	if (s == XDPL_GO_ON)
		s = xdpl_cookie_acks(ctx, p, gen, gflags, &j);
	XDPL_BENCH_STOP_AFTER(XDPL_STOP_COOKIE_ACKS);
	if (s == XDPL_GO_ON && (gflags & (XDPL_GF_CONV_TCP | XDPL_GF_CONV_UDP | XDPL_GF_CONV_REFL)))
		s = xdpl_conversation(ctx, p, g, tag, &j) ? XDPL_JUDGED : XDPL_GO_ON;
	/* A global first level's refusal, whatever the source (flows.h), where
	 * the lists, the bans and the cookie checks came first. */
	if (s == XDPL_GO_ON && (gflags & XDPL_GF_NO_SOURCE_FLOWS) && !xdpl_source_free(gflags))
		s = xdpl_cached(sc, g, tag, 1, &j);
	XDPL_BENCH_STOP_AFTER(XDPL_STOP_GLOBAL_FLOWS);
	if (s == XDPL_GO_ON)
		s = xdpl_rule_levels(ctx, p, g, gen, gflags, tag, &j);
	XDPL_BENCH_STOP_AFTER(XDPL_STOP_RULE);
	if (s == XDPL_GIVE_UP)
		return XDP_PASS;
	/* Every verdict, before an answer overwrites the frame. */
	if (g && (gflags & XDPL_GF_TRAFFIC))
		xdpl_traffic_sample(ctx, p, g->traffic_mask,
				    j.why << 24 | (j.verdict & 0xff) << 16 | (j.slot & 0xffff));
	if (j.verdict == XDPL_V_COOKIE)
		xdpl_cookie_answer(ctx, p, gen, &j);
	else if (j.verdict == XDPL_V_REJECT)
		xdpl_reject_answer(ctx, p, gen, &j);
	return xdpl_account(p, g ? g->sample_mask : 0, &j);
}
