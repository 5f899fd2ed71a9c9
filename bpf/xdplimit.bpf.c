// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/* xdplimit: per-source flood limiter at the driver level.
 *
 * Per packet: parse; allow/deny by longest prefix; find the first matching
 * rule by bitmap classification; evaluate the rule's limiter levels on state
 * shared across CPUs; count the verdict in per-CPU counters. */

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <linux/errno.h>
#include "xdplimit_consts.h"
#include "xdplimit_structs.h"
#include "xdplimit_maps.h"
#include "parsing.h"
#include "classify.h"
#include "clock.h"
#include "limiters.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Referenced so that bpf2go finds the types in BTF and emits Go for them. */
const enum xdpl_const *xdpl_unused_const __attribute__((unused));
const struct xdpl_name *xdpl_unused_name __attribute__((unused));
const struct xdpl_metadata *xdpl_unused_meta __attribute__((unused));
const struct xdpl_drop_ring *xdpl_unused_ring __attribute__((unused));
const struct xdpl_decision *xdpl_unused_decision __attribute__((unused));

static __always_inline void xdpl_count(__u32 idx, __u64 bytes)
{
	struct xdpl_counter *c = bpf_map_lookup_elem(&xdpl_counters, &idx);

	if (c) {
		c->packets++;
		c->bytes += bytes;
	}
}

/* Load-time knobs, set from Go before load; the verifier prunes what they
 * turn off. */
/* Benchmarks: rewrite the IPv4 source of each test-run buffer to the next
 * step of a full-period walk over xdpl_bench_base + [0, N) (N a power of
 * two), so that the re-run buffer is a new source each time. 0 = off. */
volatile const __u32 xdpl_bench_rotate = 0;
volatile const __be32 xdpl_bench_base = 0;
/* Sample one in (mask + 1) dropped packets into xdpl_drops for top. */
volatile const __u32 xdpl_sample_mask = 63;
/* Record every packet's decision in xdpl_decision (pcap replay). */
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
	iph->saddr = bpf_htonl(base + x);
}

static __always_inline void xdpl_sample(struct xdpl_pkt *p, __u32 verdict, __u32 slot)
{
	if ((bpf_get_prandom_u32() & xdpl_sample_mask) != 0)
		return;
	__u32 zero = 0;
	struct xdpl_drop_ring *ring = bpf_map_lookup_elem(&xdpl_drops, &zero);

	if (!ring)
		return;
	struct xdpl_drop_sample *d = &ring->s[ring->written & (XDPL_DROP_RING - 1)];

	__builtin_memcpy(d->addr, p->saddr, sizeof(d->addr));
	d->family = p->family;
	d->verdict = verdict;
	d->slot = slot;
	d->len = p->len;
	ring->written++;
}

static __always_inline void xdpl_key_of(struct xdpl_level *l, struct xdpl_pkt *p, struct xdpl_key *k)
{
	__builtin_memset(k, 0, sizeof(*k));
	k->state_id = l->state_id;
	if (l->key_kind == XDPL_KEY_GLOBAL)
		return;
	k->family = p->family;
	if (p->family == 4) {
		k->addr[0] = p->saddr[0] & l->mask4;
	} else {
#pragma unroll
		for (int i = 0; i < 4; i++)
			k->addr[i] = p->saddr[i] & l->mask6[i];
	}
	if (l->key_kind == XDPL_KEY_SRC_DPORT && p->ports == XDPL_PORTS_OK)
		k->port = p->dport;
}

static __always_inline void xdpl_decided(__u32 why, __u32 verdict, struct xdpl_rule *r, int idx,
					 int refused, struct xdpl_pkt *p)
{
	if (!xdpl_record)
		return;
	__u32 zero = 0;
	struct xdpl_decision *d = bpf_map_lookup_elem(&xdpl_last, &zero);

	if (!d)
		return;
	d->why = why;
	d->verdict = verdict;
	d->rule = idx;
	d->level = -1;
	__builtin_memset(&d->key, 0, sizeof(d->key));
	if (!r)
		return;
	int li = refused >= 0 ? refused : 0;

	if (li < XDPL_MAX_LEVELS) {
		struct xdpl_level *l = &r->levels[li];

		xdpl_key_of(l, p, &d->key);
		if (refused >= 0)
			d->level = l->origin;
	}
}

/* Creates the empty state entry of a level (which every algorithm reads as
 * "nothing consumed"). Inserting with BPF_NOEXIST and looking up again means
 * two CPUs racing on a new source share one entry. */
static __always_inline struct xdpl_state *xdpl_state_insert(struct xdpl_level *l, struct xdpl_pkt *p)
{
	struct xdpl_key k;
	struct xdpl_state empty = {};

	xdpl_key_of(l, p, &k);
	long err = bpf_map_update_elem(&xdpl_sources, &k, &empty, BPF_NOEXIST);

	if (err == 0)
		xdpl_count(XDPL_C_NEW_SOURCE, 0);
	else if (err != -EEXIST)
		xdpl_count(XDPL_C_INSERT_FAIL, 0);
	return bpf_map_lookup_elem(&xdpl_sources, &k);
}

/* Evaluates the rule's levels in two phases. First every level decides
 * without writing, in order (the control plane puts the cheap shared
 * aggregates first): a refusal costs no state change anywhere, so a flooding
 * source's dropped packets do not spend its aggregates' budget, and a
 * spoofed flood refused by a global level never touches the per-source
 * table. Then every level commits its charge with compare-and-swap; one that
 * lost a race in between refuses there. Returns the index of the refusing
 * level, or -1 when every level admitted the packet. */
static __always_inline int xdpl_limit(struct xdpl_rule *r, struct xdpl_pkt *p)
{
	struct xdpl_clk clk = {};
	struct xdpl_state *st[XDPL_MAX_LEVELS] = {};
	__u32 n = r->nlevels;

#pragma unroll
	for (int i = 0; i < XDPL_MAX_LEVELS; i++) {
		if (i >= n)
			break;
		struct xdpl_level *l = &r->levels[i];
		__u64 cost = (l->flags & XDPL_LF_BYTES) ? p->len : 1;
		struct xdpl_key k;

		xdpl_key_of(l, p, &k);
		struct xdpl_state *s = bpf_map_lookup_elem(&xdpl_sources, &k);
		struct xdpl_state fresh = {};

		st[i] = s;
		if (xdpl_apply(s ? s : &fresh, l, xdpl_now(&clk, l->flags), cost, 0) <= 0)
			return i;
	}
#pragma unroll
	for (int i = 0; i < XDPL_MAX_LEVELS; i++) {
		if (i >= n)
			break;
		struct xdpl_level *l = &r->levels[i];
		__u64 cost = (l->flags & XDPL_LF_BYTES) ? p->len : 1;
		struct xdpl_state *s = st[i] ? st[i] : xdpl_state_insert(l, p);

		/* No entry even after an insert: refuse rather than admit
		 * untracked traffic (fail closed; counted as insert failure). */
		if (!s)
			return i;
		int ok = xdpl_apply(s, l, xdpl_now(&clk, l->flags), cost, 1);

		if (ok < 0)
			xdpl_count(XDPL_C_CAS_EXHAUSTED, 0);
		if (ok <= 0)
			return i;
	}
	return -1;
}

SEC("xdp")
int xdpl_main(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct xdpl_pkt p = {};
	__u32 zero = 0;

	if (xdpl_bench_rotate)
		xdpl_bench_next_source(data, data_end);
	int pr = xdpl_parse(data, data_end, &p);

	if (pr == XDPL_PARSE_NOT_IP) {
		xdpl_count(XDPL_C_NON_IP, p.len);
		xdpl_decided(XDPL_WHY_NON_IP, XDPL_V_PASS, NULL, -1, -1, &p);
		return XDP_PASS;
	}
	if (pr != XDPL_PARSE_OK) {
		xdpl_count(XDPL_C_MALFORMED, p.len);
		xdpl_decided(XDPL_WHY_MALFORMED, XDPL_V_PASS, NULL, -1, -1, &p);
		return XDP_PASS;
	}

	struct xdpl_control *ctl = bpf_map_lookup_elem(&xdpl_ctl, &zero);

	if (!ctl)
		return XDP_PASS;
	/* Read once: the whole packet is judged by one generation. */
	__u32 gen = ctl->active & 1;
	struct xdpl_gen_cfg *g = &ctl->gen[gen];
	__u32 gflags = g->flags;

	if (gflags & XDPL_GF_ACL) {
		__u32 acl = xdpl_acl(gen, &p);

		if (acl == XDPL_ACL_ALLOW) {
			xdpl_count(XDPL_C_ALLOW, p.len);
			xdpl_decided(XDPL_WHY_ALLOW, XDPL_V_PASS, NULL, -1, -1, &p);
			return XDP_PASS;
		}
		if (acl == XDPL_ACL_DENY) {
			if (gflags & XDPL_GF_SHADOW) {
				xdpl_count(XDPL_C_DENY_SHADOW, p.len);
				xdpl_sample(&p, XDPL_V_SHADOW, XDPL_SAMPLE_DENY);
				xdpl_decided(XDPL_WHY_DENY, XDPL_V_SHADOW, NULL, -1, -1, &p);
				return XDP_PASS;
			}
			xdpl_count(XDPL_C_DENY, p.len);
			xdpl_sample(&p, XDPL_V_DROP, XDPL_SAMPLE_DENY);
			xdpl_decided(XDPL_WHY_DENY, XDPL_V_DROP, NULL, -1, -1, &p);
			return XDP_DROP;
		}
	}

	int idx = xdpl_classify(gen, g, &p);

	if (idx < 0) {
		xdpl_count(XDPL_C_UNMATCHED, p.len);
		xdpl_decided(XDPL_WHY_UNMATCHED, XDPL_V_PASS, NULL, -1, -1, &p);
		return XDP_PASS;
	}
	__u32 rk = gen * XDPL_MAX_RULES + idx;
	struct xdpl_rule *r = bpf_map_lookup_elem(&xdpl_rules, &rk);

	if (!r)
		return XDP_PASS;

	int refused = xdpl_limit(r, &p);
	__u32 verdict = XDPL_V_PASS;

	if (refused >= 0)
		verdict = ((r->flags & XDPL_RF_SHADOW) || (gflags & XDPL_GF_SHADOW)) ? XDPL_V_SHADOW :
										       XDPL_V_DROP;

	__u32 slot = r->counter_slot;
	struct xdpl_rule_stats *st = bpf_map_lookup_elem(&xdpl_stats, &slot);

	if (st) {
		if (verdict < XDPL_NVERDICTS) {
			st->v[verdict].packets++;
			st->v[verdict].bytes += p.len;
		}
		if (refused >= 0 && refused < XDPL_MAX_LEVELS)
			st->level_drops[r->levels[refused].origin & (XDPL_MAX_LEVELS - 1)]++;
	}
	if (verdict != XDPL_V_PASS)
		xdpl_sample(&p, verdict, slot);
	xdpl_decided(XDPL_WHY_RULE, verdict, r, idx, refused, &p);
	return verdict == XDPL_V_DROP ? XDP_DROP : XDP_PASS;
}
