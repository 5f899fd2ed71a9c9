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

static __always_inline void xdpl_count(__u32 idx, __u64 bytes)
{
	struct xdpl_counter *c = bpf_map_lookup_elem(&xdpl_counters, &idx);

	if (c) {
		c->packets++;
		c->bytes += bytes;
	}
}

/* The state entry of a level for this packet, created empty (which every
 * algorithm reads as "nothing consumed") when missing. Inserting with
 * BPF_NOEXIST and looking up again means two CPUs racing on a new source
 * share one entry instead of overwriting each other's. */
static __always_inline struct xdpl_state *xdpl_state_of(struct xdpl_level *l, struct xdpl_pkt *p)
{
	struct xdpl_key k = { .state_id = l->state_id };

	if (l->key_kind != XDPL_KEY_GLOBAL) {
		k.family = p->family;
		if (p->family == 4) {
			k.addr[0] = p->saddr[0] & l->mask4;
		} else {
#pragma unroll
			for (int i = 0; i < 4; i++)
				k.addr[i] = p->saddr[i] & l->mask6[i];
		}
		if (l->key_kind == XDPL_KEY_SRC_DPORT && p->ports == XDPL_PORTS_OK)
			k.port = p->dport;
	}
	struct xdpl_state *s = bpf_map_lookup_elem(&xdpl_sources, &k);

	if (s)
		return s;
	struct xdpl_state empty = {};
	long err = bpf_map_update_elem(&xdpl_sources, &k, &empty, BPF_NOEXIST);

	if (err == 0)
		xdpl_count(XDPL_C_NEW_SOURCE, 0);
	else if (err != -EEXIST)
		xdpl_count(XDPL_C_INSERT_FAIL, 0);
	return bpf_map_lookup_elem(&xdpl_sources, &k);
}

/* Evaluates the rule's levels in order. Returns the index of the level that
 * refused the packet, or -1 when every level admitted it. */
static __always_inline int xdpl_limit(struct xdpl_rule *r, struct xdpl_pkt *p)
{
	struct xdpl_clk clk = {};
	__u32 n = r->nlevels;

#pragma unroll
	for (int i = 0; i < XDPL_MAX_LEVELS; i++) {
		if (i >= n)
			break;
		struct xdpl_level *l = &r->levels[i];
		__u64 cost = (l->flags & XDPL_LF_BYTES) ? p->len : 1;
		struct xdpl_state *s = xdpl_state_of(l, p);

		/* No entry even after an insert: refuse rather than admit
		 * untracked traffic (fail closed; counted as insert failure). */
		if (!s)
			return i;
		int ok = xdpl_apply(s, l, xdpl_now(&clk, l->flags), cost);

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

	int pr = xdpl_parse(data, data_end, &p);

	if (pr == XDPL_PARSE_NOT_IP) {
		xdpl_count(XDPL_C_NON_IP, p.len);
		return XDP_PASS;
	}
	if (pr != XDPL_PARSE_OK) {
		xdpl_count(XDPL_C_MALFORMED, p.len);
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
			return XDP_PASS;
		}
		if (acl == XDPL_ACL_DENY) {
			if (gflags & XDPL_GF_SHADOW) {
				xdpl_count(XDPL_C_DENY_SHADOW, p.len);
				return XDP_PASS;
			}
			xdpl_count(XDPL_C_DENY, p.len);
			return XDP_DROP;
		}
	}

	int idx = xdpl_classify(gen, g, &p);

	if (idx < 0) {
		xdpl_count(XDPL_C_UNMATCHED, p.len);
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
			st->level_drops[refused]++;
	}
	return verdict == XDPL_V_DROP ? XDP_DROP : XDP_PASS;
}
