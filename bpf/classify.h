/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Rule lookup without a rule loop: each match dimension maps the packet's
 * field to the bitmap of rules it satisfies (an array index or an LPM
 * lookup), the bitmaps are ANDed, and the lowest set bit is the first
 * matching rule in file order. The cost is one lookup per dimension the
 * policy uses, whatever the number of rules. */
#ifndef XDPLIMIT_CLASSIFY_H
#define XDPLIMIT_CLASSIFY_H

#include "xdplimit_maps.h"
#include "parsing_defs.h"
#include "bitmap.h"
#include "classify_payload.h"

/* Index of the lowest set bit of a non-zero word: BPF has no ctz. The
 * lowest bit alone, times a de Bruijn sequence, has a distinct top six bits
 * for each of the 64 positions: a multiply and one load from this table,
 * where halving the word six times was a chain of six dependent tests. */
static const __u8 xdpl_debruijn64[64] = {
    0,	1,  2,	53, 3,	7,  54, 27, 4,	38, 41, 8,  34, 55, 48, 28, 62, 5,  39, 46, 44, 42,
    22, 9,  24, 35, 59, 56, 49, 18, 29, 11, 63, 52, 6,	26, 37, 40, 33, 47, 61, 45, 43, 21,
    23, 58, 17, 10, 51, 25, 36, 32, 60, 20, 57, 16, 50, 31, 19, 15, 30, 14, 13, 12};

static __always_inline __u32 xdpl_ctz64(__u64 x)
{
	return xdpl_debruijn64[((x & -x) * 0x022fdd63cc95386dULL) >> 58];
}

static __always_inline void *xdpl_lookup_addr(void *map4, void *map6, __u32 gen, __u8 family,
					      __be32 *addr)
{
	if (family == 4) {
		struct xdpl_lpm4 k = {.prefixlen = 8 + 32, .gen = gen};

		__builtin_memcpy(k.addr, addr, 4);
		return bpf_map_lookup_elem(map4, &k);
	}
	struct xdpl_lpm6 k = {.prefixlen = 8 + 128, .gen = gen};

	__builtin_memcpy(k.addr, addr, 16);
	return bpf_map_lookup_elem(map6, &k);
}

static __always_inline __u32 xdpl_port_idx(struct xdpl_pkt *p, __u16 port)
{
	if (p->ports == XDPL_PORTS_OK)
		return port;
	return p->ports == XDPL_PORTS_FRAG ? XDPL_PORT_IDX_FRAG : XDPL_PORT_IDX_NONE;
}

/* ICMP type or code slot: a non-first fragment's or a cut header's are
 * unknown, and match every icmp rule as unknown ports match every port rule. */
static __always_inline __u32 xdpl_icmp_idx(struct xdpl_pkt *p, __u8 v)
{
	if (p->icmp == XDPL_ICMP_OK)
		return v;
	if (p->icmp == XDPL_ICMP_UNKNOWN || p->ports == XDPL_PORTS_FRAG)
		return XDPL_ICMP_IDX_FRAG;
	return XDPL_ICMP_IDX_NONE;
}

/* The signature fields: rarely used, so kept out of the common path's
 * code behind one test of their dimension bits. */
static __always_inline int xdpl_classify_fields(struct xdpl_acc *acc, __u32 gen, __u32 dims,
						struct xdpl_pkt *p)
{
	__u32 k;

	if (dims & XDPL_DIM_LEN) {
		k = gen * XDPL_LEN_SLOTS + p->iplen;
		if (!xdpl_and(acc, bpf_map_lookup_elem(&xdpl_iplen, &k)))
			return 0;
	}
	if (dims & XDPL_DIM_TTL) {
		k = gen * XDPL_TTL_SLOTS + p->ttl;
		if (!xdpl_and(acc, bpf_map_lookup_elem(&xdpl_ttl, &k)))
			return 0;
	}
	if (dims & XDPL_DIM_TOS) {
		k = gen * XDPL_TOS_SLOTS + p->tos;
		if (!xdpl_and(acc, bpf_map_lookup_elem(&xdpl_tos, &k)))
			return 0;
	}
	if (dims & XDPL_DIM_ICMPT) {
		k = gen * XDPL_ICMP_SLOTS + xdpl_icmp_idx(p, p->icmp_type);
		if (!xdpl_and(acc, bpf_map_lookup_elem(&xdpl_icmpt, &k)))
			return 0;
	}
	if (dims & XDPL_DIM_ICMPC) {
		k = gen * XDPL_ICMP_SLOTS + xdpl_icmp_idx(p, p->icmp_code);
		if (!xdpl_and(acc, bpf_map_lookup_elem(&xdpl_icmpc, &k)))
			return 0;
	}
	return 1;
}

#define XDPL_DIMS_FIELDS                                                                           \
	(XDPL_DIM_LEN | XDPL_DIM_TTL | XDPL_DIM_TOS | XDPL_DIM_ICMPT | XDPL_DIM_ICMPC)

/* The payload dimension for a packet without payload: no load, no
 * lookup of the packet's bytes, and no call (the cookie ACK check's stack
 * has no room for one more frame on 6.1). */
static __always_inline int xdpl_classify_no_payload(__u32 gen, struct xdpl_acc *acc)
{
	gen &= 1;
	struct xdpl_payload_cfg *cfg = bpf_map_lookup_elem(&xdpl_payload_shapes, &gen);

	return cfg && xdpl_and(acc, &cfg->empty);
}

/* The dimensions read from the packet's headers, and the others: each
 * group is passed over with one test where the generation matches on
 * none of it (a catch-all rule matches on nothing), not one per dimension. */
#define XDPL_DIMS_HEADER                                                                           \
	(XDPL_DIM_PROTO | XDPL_DIM_DPORT | XDPL_DIM_SPORT | XDPL_DIM_TCPF | XDPL_DIM_VLAN)

static __always_inline int xdpl_classify_header(struct xdpl_acc *acc, __u32 gen, __u32 dims,
						struct xdpl_pkt *p)
{
	__u32 k;

	if (dims & XDPL_DIM_PROTO) {
		k = gen * XDPL_PROTO_SLOTS + (p->family == 6 ? 256 : 0) + p->proto;
		if (!xdpl_and(acc, bpf_map_lookup_elem(&xdpl_proto, &k)))
			return 0;
	}
	if (dims & XDPL_DIM_DPORT) {
		k = gen * XDPL_PORT_SLOTS + xdpl_port_idx(p, p->dport);
		if (!xdpl_and(acc, bpf_map_lookup_elem(&xdpl_dport, &k)))
			return 0;
	}
	if (dims & XDPL_DIM_SPORT) {
		k = gen * XDPL_PORT_SLOTS + xdpl_port_idx(p, p->sport);
		if (!xdpl_and(acc, bpf_map_lookup_elem(&xdpl_sport, &k)))
			return 0;
	}
	if (dims & XDPL_DIM_TCPF) {
		__u32 v = p->proto != IPPROTO_TCP	? XDPL_TCPF_IDX_NONE
			  : p->ports == XDPL_PORTS_FRAG ? XDPL_TCPF_IDX_FRAG
							: p->tcp_flags;

		k = gen * XDPL_TCPF_SLOTS + v;
		if (!xdpl_and(acc, bpf_map_lookup_elem(&xdpl_tcpf, &k)))
			return 0;
	}
	if (dims & XDPL_DIM_VLAN) {
		k = gen * XDPL_VLAN_SLOTS + p->vlan;
		if (!xdpl_and(acc, bpf_map_lookup_elem(&xdpl_vlan, &k)))
			return 0;
	}
	return 1;
}

static __always_inline int xdpl_classify_rest(struct xdp_md *ctx, struct xdpl_acc *acc, __u32 gen,
					      __u32 dims, struct xdpl_pkt *p, int no_payload)
{
	/* Array lookups before the tries: a miss there is cheaper. */
	if ((dims & XDPL_DIMS_FIELDS) && !xdpl_classify_fields(acc, gen, dims, p))
		return 0;
	if (dims & XDPL_DIM_SRC) {
		if (!xdpl_and(acc,
			      xdpl_lookup_addr(&xdpl_src4, &xdpl_src6, gen, p->family, p->saddr)))
			return 0;
	}
	if (dims & XDPL_DIM_DST) {
		if (!xdpl_and(acc,
			      xdpl_lookup_addr(&xdpl_dst4, &xdpl_dst6, gen, p->family, p->daddr)))
			return 0;
	}
	/* Last: a load and a hash lookup per window. */
	if (dims & XDPL_DIM_PAYLOAD) {
		if (no_payload ? !xdpl_classify_no_payload(gen, acc)
			       : !xdpl_classify_payload(ctx, p, gen, acc))
			return 0;
	}
	return 1;
}

/* Returns the index of the first matching rule, or -1. A constant
 * no_payload classifies p as if it carried no payload. */
static __always_inline int xdpl_classify(struct xdp_md *ctx, __u32 gen, struct xdpl_gen_cfg *g,
					 struct xdpl_pkt *p, int no_payload)
{
	__u32 nrules = g->nrules;
	__u32 dims = g->dims;
	struct xdpl_acc acc;

	if (nrules == 0 || nrules > XDPL_MAX_RULES)
		return -1;
#pragma unroll
	for (int i = 0; i < XDPL_BITMAP_WORDS; i++)
		acc.w[i] = ~0ULL;

	if ((dims & XDPL_DIMS_HEADER) && !xdpl_classify_header(&acc, gen, dims, p))
		return -1;
	if ((dims & ~XDPL_DIMS_HEADER) && !xdpl_classify_rest(ctx, &acc, gen, dims, p, no_payload))
		return -1;

	/* With no dimension in use every rule matches and the first wins; the
	 * control plane never sets bits at or beyond nrules. */
#pragma unroll
	for (int i = 0; i < XDPL_BITMAP_WORDS; i++) {
		if (acc.w[i]) {
			int idx = i * 64 + xdpl_ctz64(acc.w[i]);

			return idx < (int)nrules ? idx : -1;
		}
	}
	return -1;
}

/* Allow/deny: the longest matching prefix over both lists decides. A host
 * address is the longest prefix there is, so its hash entry decides when
 * there is one; the trie of shorter prefixes is walked only after a miss,
 * and only when the generation has such prefixes (gflags: XDPL_GF_ACL_*). */
static __always_inline __u32 xdpl_acl(__u32 gen, __u32 gflags, struct xdpl_pkt *p)
{
	__u32 *v = NULL;

	if (gflags & XDPL_GF_ACL_EXACT) {
		if (p->family == 4) {
			struct xdpl_host4 k = {.gen = gen, .addr = p->saddr[0]};

			v = bpf_map_lookup_elem(&xdpl_acl4_hosts, &k);
			asm volatile("" : "+r"(v)); /* one map per call site */
		} else {
			struct xdpl_host6 k = {.gen = gen};

			__builtin_memcpy(k.addr, p->saddr, sizeof(k.addr));
			v = bpf_map_lookup_elem(&xdpl_acl6_hosts, &k);
		}
		if (v)
			return *v;
	}
	if (!(gflags & XDPL_GF_ACL_PREFIX))
		return 0;
	v = xdpl_lookup_addr(&xdpl_acl4, &xdpl_acl6, gen, p->family, p->saddr);
	return v ? *v : 0;
}

#endif
