// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/* The live-frames traffic generator and its receiver-side helpers.
 *
 * xdpl_pktgen runs under BPF_PROG_TEST_RUN with BPF_F_TEST_XDP_LIVE_FRAMES:
 * the kernel runs it on copies of a template frame, and XDP_TX sends each one
 * out of the veth named by ingress_ifindex to the peer's XDP program. It
 * rewrites the source address per frame and fixes the checksums
 * incrementally.
 *
 * The kernel keeps a pool of frame pages initialised from the template only
 * when a page is first allocated; whether a page comes back with our previous
 * rewrite depends on where the frame went (see package pktgen's doc). So
 * nothing here depends on what a previous run left in the buffer: the source
 * comes from a per-CPU sequence number, and the checksum update is computed
 * from the address actually in the buffer to the new one, which is correct
 * for a fresh page and for a recycled one alike. */

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "pktgen.h"
#include "hash.h"
#include "csum.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct pktgen_cfg pktgen_config;

/* Never used: enums used only as values are absent from BTF unless
 * something refers to them, and bpf2go (-type) emits Go constants only for
 * types it finds there. */
const enum pktgen_stat *pktgen_unused_stat __attribute__((unused));
const enum pktgen_limits *pktgen_unused_limits __attribute__((unused));

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, PKTGEN_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} pktgen_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct pktgen_state);
} pktgen_state SEC(".maps");

/* Sources xdpl_count saw, with a frame count each. Shared across CPUs, so
 * the counts are updated atomically. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, PKTGEN_SEEN_MAX);
	__type(key, struct pktgen_addr);
	__type(value, __u64);
} pktgen_seen SEC(".maps");

static __always_inline void count(__u32 stat)
{
	if (stat >= PKTGEN_STAT_MAX)
		return;
	__u64 *v = bpf_map_lookup_elem(&pktgen_stats, &stat);
	/* Per-CPU: no other CPU writes this slot, no atomic needed. */
	if (v)
		*v += 1;
}

/* Returns a pointer to size bytes at a configured offset, or NULL. */
static __always_inline void *at(void *data, void *data_end, __u32 off, __u32 size)
{
	if (off > PKTGEN_MAX_OFF)
		return NULL;
	void *p = data + off;
	if (p + size > data_end)
		return NULL;
	return p;
}

static __always_inline __u32 next_source(struct pktgen_state *st)
{
	__u64 seq = st->seq++;

	if (pktgen_config.mode == PKTGEN_MODE_RANDOM) {
		__u64 cpu = bpf_get_smp_processor_id();
		__u32 mask = pktgen_config.mask;

		/* fmix64 is a bijection: distinct (cpu, seq) never collide
		 * before the truncation to 32 bits. */
		return (pktgen_config.base & ~mask) |
		       ((__u32)xdpl_fmix64(seq ^ (cpu << 48)) & mask);
	}

	/* PKTGEN_MODE_SEQ: a wrapping cursor instead of seq % count, which
	 * would cost a 64-bit division per frame. */
	__u32 idx = st->cursor;
	if (idx >= pktgen_config.count)
		idx = 0;
	__u32 next = idx + 1;
	st->cursor = next >= pktgen_config.count ? 0 : next;
	return pktgen_config.base + idx;
}

SEC("xdp")
int xdpl_pktgen(struct xdp_md *ctx)
{
	__u32 zero = 0;
	__u32 want = pktgen_config.frame_len;

	/* Restore the length and the headers: the page may carry the last
	 * receiver's edits. */
	if (want) {
		int grow = (int)want - (int)bpf_xdp_get_buff_len(ctx);

		if (grow && bpf_xdp_adjust_tail(ctx, grow))
			goto bad;
	}
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;

	for (int i = 0; i < PKTGEN_HDR_WORDS; i++) {
		__u64 *w = data + i * 8;

		if (i >= pktgen_config.hdr_words || (void *)(w + 1) > data_end)
			break;
		*w = pktgen_config.hdr[i];
	}
	if (pktgen_config.mode == PKTGEN_MODE_FIXED)
		goto tx;

	struct pktgen_state *st = bpf_map_lookup_elem(&pktgen_state, &zero);
	if (!st)
		goto bad;

	__be32 *src = at(data, data_end, pktgen_config.src_off, sizeof(*src));
	if (!src)
		goto bad;
	__be32 old = *src;
	__be32 new = bpf_htonl(next_source(st));
	if (old == new)
		goto tx;
	*src = new;

	__u32 flags = pktgen_config.flags;
	if (flags & PKTGEN_F_IP4_CSUM) {
		__u16 *csum = at(data, data_end, pktgen_config.ip_csum_off, sizeof(*csum));
		if (!csum)
			goto bad;
		*csum = csum_replace4(*csum, old, new);
	}
	if (flags & PKTGEN_F_L4_CSUM) {
		__u16 *csum = at(data, data_end, pktgen_config.l4_csum_off, sizeof(*csum));
		if (!csum)
			goto bad;
		if ((flags & PKTGEN_F_L4_UDP) && *csum == 0)
			goto tx; /* UDP over IPv4 without a checksum */
		__u16 c = csum_replace4(*csum, old, new);
		if ((flags & PKTGEN_F_L4_UDP) && c == 0)
			c = 0xffff;
		*csum = c;
	}

tx:
	count(PKTGEN_STAT_TX);
	return XDP_TX;
bad:
	count(PKTGEN_STAT_BAD_FRAME);
	return XDP_ABORTED;
}

/* For the peer end of a veth in tests without a limiter: frames sent to a
 * veth whose peer has no XDP program are dropped silently. */
SEC("xdp")
int xdpl_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

/* For measuring the generator alone: the peer drops every frame in XDP, so
 * no receive stack work shares the CPUs with the generator. */
SEC("xdp")
int xdpl_drop(struct xdp_md *ctx)
{
	return XDP_DROP;
}

struct vlan_hdr {
	__be16 tci;
	__be16 proto;
};

/* xdpl_pass that also records every source address in pktgen_seen, so a
 * test can check how many distinct sources arrived. */
SEC("xdp")
int xdpl_count(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct pktgen_addr key = {};

	count(PKTGEN_STAT_RX);

	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		goto other;
	__be16 proto = eth->h_proto;
	void *pos = eth + 1;

	/* Up to two tags: 802.1ad outer, 802.1Q inner. */
#pragma unroll
	for (int i = 0; i < 2; i++) {
		if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD))
			break;
		struct vlan_hdr *vh = pos;
		if ((void *)(vh + 1) > data_end)
			goto other;
		proto = vh->proto;
		pos = vh + 1;
	}

	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = pos;
		if ((void *)(ip + 1) > data_end)
			goto other;
		key.addr[2] = bpf_htonl(0xffff);
		key.addr[3] = ip->saddr;
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = pos;
		if ((void *)(ip6 + 1) > data_end)
			goto other;
		__builtin_memcpy(&key, &ip6->saddr, sizeof(key));
	} else {
		goto other;
	}

	__u64 *n = bpf_map_lookup_elem(&pktgen_seen, &key);
	if (!n) {
		__u64 one = 1;
		/* Insert-if-absent, then look up again: another CPU may have
		 * inserted the same source in between. */
		if (bpf_map_update_elem(&pktgen_seen, &key, &one, BPF_NOEXIST) == 0)
			return XDP_PASS;
		n = bpf_map_lookup_elem(&pktgen_seen, &key);
		if (!n) {
			count(PKTGEN_STAT_SEEN_FULL);
			return XDP_PASS;
		}
	}
	__sync_fetch_and_add(n, 1);
	return XDP_PASS;

other:
	count(PKTGEN_STAT_RX_OTHER);
	return XDP_PASS;
}
