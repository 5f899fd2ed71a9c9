/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The parser's entry point, and its fast path: the common frame (untagged,
 * IPv4 without options or IPv6 without extension headers, an unfragmented
 * TCP or UDP packet) in one straight line, with one bounds check against
 * the frame for every header the checks read. It makes the checks the
 * general walk in parsing.h makes, in the same terms; anything it does not
 * take to the end (another shape, or a check that fails) goes to that walk
 * from the start, which then says what is wrong. A failing check therefore
 * costs twice, a passing one once: floods of well-formed packets are the
 * ones to be cheap. */
#ifndef XDPLIMIT_PARSING_FAST_H
#define XDPLIMIT_PARSING_FAST_H

#include "parsing.h"

/* The transport checks both IP versions share: left is what the IP length
 * leaves after the IP header. 1 when the header passes. */
static __always_inline int xdpl_fast_l4(__u8 *l4, void *end, __u8 proto, __u32 left,
					struct xdpl_pkt *p)
{
	if (proto == IPPROTO_UDP) {
		__u32 ulen = (__u32)l4[4] << 8 | l4[5];

		/* 0 is an IPv6 jumbogram's: left to the walk. */
		if (ulen < 8 || ulen > left)
			return 0;
	} else if (proto == IPPROTO_TCP) {
		if ((void *)(l4 + 20) > end)
			return 0;
		__u32 doff = (l4[12] >> 4) * 4;

		if (doff < 20 || doff > left)
			return 0;
		p->tcp_flags = l4[13];
	} else {
		return 0;
	}
	p->proto = proto;
	p->sport = (__u16)l4[0] << 8 | l4[1];
	p->dport = (__u16)l4[2] << 8 | l4[3];
	p->ports = XDPL_PORTS_OK;
	p->vlan = XDPL_VLAN_IDX_UNTAGGED;
	return 1;
}

/* ip_rcv_core's checks for a header without options and no fragment. */
static __always_inline int xdpl_fast_ipv4(void *data, void *end, struct xdpl_pkt *p)
{
	struct iphdr *iph = data + sizeof(struct ethhdr);
	__u8 *l4 = (void *)(iph + 1);

	/* The shortest frame taken: the IP header and a UDP header. */
	if ((void *)(l4 + 8) > end)
		return 0;
	if (*(__u8 *)iph != 0x45 || (iph->frag_off & bpf_htons(XDPL_IP_MF | XDPL_IP_OFFMASK)))
		return 0;
	__u32 tot = bpf_ntohs(iph->tot_len);

	if (tot < sizeof(*iph) || sizeof(struct ethhdr) + tot > p->len)
		return 0;
	__u32 *w = (__u32 *)iph;

	if (csum_fold32s((__u64)w[0] + w[1] + w[2] + w[3] + w[4]) != 0xffff)
		return 0;
	if (!xdpl_fast_l4(l4, end, iph->protocol, tot - sizeof(*iph), p))
		return 0;
	p->family = 4;
	p->iplen = tot;
	p->ttl = iph->ttl;
	p->tos = iph->tos;
	p->saddr[0] = iph->saddr;
	p->daddr[0] = iph->daddr;
	return 1;
}

/* ipv6_rcv's checks for a header followed directly by TCP or UDP. */
static __always_inline int xdpl_fast_ipv6(void *data, void *end, struct xdpl_pkt *p)
{
	struct ipv6hdr *ip6 = data + sizeof(struct ethhdr);
	__u8 *l4 = (void *)(ip6 + 1);

	if ((void *)(l4 + 8) > end)
		return 0;
	if ((*(__u8 *)ip6 & 0xf0) != 0x60)
		return 0;
	__u32 plen = bpf_ntohs(ip6->payload_len);

	if (sizeof(struct ethhdr) + sizeof(*ip6) + plen > p->len)
		return 0;
	if (!xdpl_fast_l4(l4, end, ip6->nexthdr, plen, p))
		return 0;
	p->family = 6;
	p->iplen = sizeof(*ip6) + plen;
	p->ttl = ip6->hop_limit;
	p->tos = ip6->priority << 4 | ip6->flow_lbl[0] >> 4;
	__builtin_memcpy(p->saddr, &ip6->saddr, 16);
	__builtin_memcpy(p->daddr, &ip6->daddr, 16);
	return 1;
}

/* Parses the frame into p: XDPL_PARSE_OK, NOT_IP, or UNPARSED (p->unparsed
 * says why). The fast path writes p only once every check has passed, so
 * the walk starts from the same p as if the fast path had not run. */
static __always_inline int xdpl_parse(struct xdp_md *ctx, struct xdpl_pkt *p)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;

	p->len = end - data;
	if ((void *)(eth + 1) <= end) {
		if (eth->h_proto == bpf_htons(ETH_P_IP) && xdpl_fast_ipv4(data, end, p))
			return XDPL_PARSE_OK;
		if (eth->h_proto == bpf_htons(ETH_P_IPV6) && xdpl_fast_ipv6(data, end, p))
			return XDPL_PARSE_OK;
	}
	return xdpl_parse_walk(ctx, p);
}

#endif
