/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The parser's entry point (xdpl_parse_counted). Header parsing that
 * follows the Linux receive path: a frame the stack would deliver is parsed
 * to its transport header and judged; a frame the stack would drop
 * (truncated, a length or header field ip_rcv_core or ipv6_rcv refuses, a
 * bad IPv4 header checksum) is "unparsed" and goes to the policy's unparsed
 * action, never charged to a rule. Every read is checked
 * against data_end, and the IP end (total or payload length: the stack trims
 * the frame to it) bounds the transport header. The VLAN and IPv6
 * extension-header walks are bounded; beyond the bounds:
 *   - VLAN tags: followed to the end (as many as a frame can hold);
 *   - more than XDPL_MAX_IPV6_EXT extension headers: judged by source as a
 *     non-first fragment is (protocol, ports and flags unknown, treated as
 *     matching every rule), never waved through.
 * The layers are in parsing_l2.h (Ethernet, VLAN tags), parsing_l3.h (IPv4,
 * IPv6 and its extension headers) and parsing_l4.h (the transport header),
 * what they share in parsing_defs.h; parsing_fast.h takes the common frame
 * in one straight line. */
#ifndef XDPLIMIT_PARSING_H
#define XDPLIMIT_PARSING_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <linux/if_ether.h>
#include <bpf/bpf_endian.h>
#include "xdplimit_structs.h"
#include "parsing_defs.h"
#include "parsing_l2.h"
#include "parsing_l3.h"
#include "parsing_l4.h"
#include "parsing_fast.h"
#include "counters.h"

/* The general walk, layer by layer (xdpl_parse tries the straight line
 * for the common frame first). */
static __always_inline int xdpl_parse_walk(struct xdp_md *ctx, struct xdpl_pkt *p)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 len = data_end - data;
	struct xdpl_cursor c = {.data = data, .end = data_end, .lim = len};
	int r;

	p->len = len;
	__be16 proto = xdpl_parse_eth(ctx, &c, p);

	if (p->unparsed)
		return XDPL_PARSE_UNPARSED;
	if (proto == bpf_htons(ETH_P_IP))
		r = xdpl_parse_ipv4(&c, p);
	else if (proto == bpf_htons(ETH_P_IPV6))
		r = xdpl_parse_ipv6(ctx, &c, p);
	else
		return XDPL_PARSE_NOT_IP;
	if (r != XDPL_PARSE_OK)
		return r;
	return xdpl_parse_l4(&c, p);
}

/* Parses the frame into p: XDPL_PARSE_OK, NOT_IP, or UNPARSED (p->unparsed
 * says why). The fast path writes every word of p, and only once every
 * check has passed; the walk starts from a zeroed p, as if the fast path
 * had not run. */
static __always_inline int xdpl_parse(struct xdp_md *ctx, struct xdpl_pkt *p)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u32 len = end - data;

	if ((void *)(eth + 1) <= end) {
		if (eth->h_proto == bpf_htons(ETH_P_IP) && xdpl_fast_ipv4(data, end, len, p))
			return XDPL_PARSE_OK;
		if (eth->h_proto == bpf_htons(ETH_P_IPV6) && xdpl_fast_ipv6(data, end, len, p))
			return XDPL_PARSE_OK;
	}
	__builtin_memset(p, 0, sizeof(*p));
	return xdpl_parse_walk(ctx, p);
}

/* The parser's entry point: xdpl_parse, with long IPv6 chains counted as
 * unparsed frames of their kind (they go on to the rules all the same). */
static __always_inline int xdpl_parse_counted(struct xdp_md *ctx, struct xdpl_pkt *p)
{
	int r = xdpl_parse(ctx, p);

	if (r == XDPL_PARSE_OK && p->long_chain)
		xdpl_unparsed_count(XDPL_UP_TOO_MANY_HEADERS, p, 0);
	return r;
}

#endif
