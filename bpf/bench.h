/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The benchmarks' knobs: load-time constants, set from Go before load and
 * 0 in production, where the verifier prunes the one stage that reads them
 * (xdpl_bench, the first of xdpl_main's). */
#ifndef XDPLIMIT_BENCH_H
#define XDPLIMIT_BENCH_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <bpf/bpf_endian.h>
#include "csum.h"
#include "parsing.h"
#include "floor.h"

/* Rewrite the IPv4 source of each test-run buffer to the next step of a
 * full-period walk over xdpl_bench_base + [0, N) (N a power of two), so
 * that the re-run buffer is a new source each time. 0 = off. */
volatile const __u32 xdpl_bench_rotate = 0;
volatile const __be32 xdpl_bench_base = 0;
/* Parse, then drop: what the parser alone costs, the floor under every
 * verdict. 0 = off. */
volatile const __u32 xdpl_bench_parse_only = 0;

/* The stage benchmark's build (XDPL_BENCH_STAGES, a program of its own in
 * gen/) ends each packet with XDP_DROP after stage xdpl_bench_stop (an
 * XDPL_STOP_*; 0 = off): what each stage adds, measured. Production's
 * build has no test between its stages, which the verifier would keep as
 * a load and a dead branch each. */
#ifdef XDPL_BENCH_STAGES
volatile const __u32 xdpl_bench_stop = 0;
#define XDPL_BENCH_STOP_AFTER(stage)                                                               \
	do {                                                                                       \
		if (xdpl_bench_stop == (stage))                                                    \
			return XDP_DROP;                                                           \
	} while (0)
#else
#define XDPL_BENCH_STOP_AFTER(stage)                                                               \
	do {                                                                                       \
	} while (0)
#endif

/* Restore each test-run buffer to the first xdpl_bench_frame_len bytes of
 * xdpl_bench_frame before anything else: the kernel re-runs one buffer and
 * keeps what the program wrote into it, so a SYN answered once is a
 * SYN-ACK from the second run on. The frame is in .bss, not .rodata:
 * bpf_xdp_store_bytes took its source as writable memory until stable
 * kernels fixed it in 2025. 0 = off. */
#define XDPL_BENCH_FRAME_MAX 128
volatile const __u32 xdpl_bench_frame_len = 0;
__u8 xdpl_bench_frame[XDPL_BENCH_FRAME_MAX];

static __always_inline void xdpl_bench_restore(struct xdp_md *ctx)
{
	__u32 len = xdpl_bench_frame_len;
	int grow = (int)len - (int)(ctx->data_end - ctx->data);

	if (len > XDPL_BENCH_FRAME_MAX || (grow && bpf_xdp_adjust_tail(ctx, grow)))
		return;
	bpf_xdp_store_bytes(ctx, 0, xdpl_bench_frame, len);
}

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

#define XDPL_BENCH_GO_ON (-1)

/* The benchmarks' stage, before the packet is parsed: restores the frame,
 * rotates its source, or parses it into p and ends it there. Returns
 * XDPL_BENCH_GO_ON, or the packet's XDP action: XDP_DROP after the parser
 * alone, a floor program's verdict (floor.h). */
static __always_inline int xdpl_bench(struct xdp_md *ctx, struct xdpl_pkt *p)
{
	if (xdpl_bench_frame_len)
		xdpl_bench_restore(ctx);
	if (xdpl_bench_rotate)
		xdpl_bench_next_source((void *)(long)ctx->data, (void *)(long)ctx->data_end);
	if (!xdpl_bench_parse_only)
		return XDPL_BENCH_GO_ON;
	int r = xdpl_parse_counted(ctx, p);

	return XDPL_BENCH_FLOOR(p, r);
}

#endif
