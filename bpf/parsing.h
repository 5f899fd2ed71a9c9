/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Header parsing with a cursor: every header is bounds-checked against
 * data_end before it is read, the IPv4 header length is re-checked, and the
 * VLAN and IPv6 extension-header walks are bounded. */
#ifndef XDPLIMIT_PARSING_H
#define XDPLIMIT_PARSING_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_endian.h>
#include "xdplimit_consts.h"

#ifndef ETH_P_8021AD
#define ETH_P_8021AD 0x88A8
#endif
#define XDPL_IPPROTO_SCTP    132
#define XDPL_IPPROTO_UDPLITE 136
#define XDPL_IPV6_HOPOPTS    0
#define XDPL_IPV6_ROUTING    43
#define XDPL_IPV6_FRAGMENT   44
#define XDPL_IPV6_AH	     51
#define XDPL_IPV6_DSTOPTS    60
#define XDPL_IP_OFFMASK	     0x1fff

enum xdpl_parse_result {
	XDPL_PARSE_OK = 0,
	XDPL_PARSE_NOT_IP = 1,
	XDPL_PARSE_MALFORMED = 2,
};

enum xdpl_ports {
	XDPL_PORTS_NONE = 0, /* protocol without ports */
	XDPL_PORTS_OK = 1,
	XDPL_PORTS_FRAG = 2, /* non-first fragment: ports unknown */
};

struct xdpl_pkt {
	__u32 len;   /* frame length in bytes: the cost of byte-counting limits */
	__u8 family; /* 4 or 6 */
	__u8 proto;  /* L4 protocol after IPv6 extension headers */
	__u8 ports;  /* enum xdpl_ports */
	__u8 tcp_flags;
	__u16 sport; /* host order */
	__u16 dport;
	__u16 vlan; /* VID of the outer tag, or XDPL_VLAN_IDX_UNTAGGED */
	__u16 pad;
	__be32 saddr[4];
	__be32 daddr[4];
};

struct xdpl_cursor {
	void *pos;
	void *end;
};

struct xdpl_vlan_hdr {
	__be16 tci;
	__be16 proto;
};

struct xdpl_ip6_ext {
	__u8 nexthdr;
	__u8 hdrlen;
};

struct xdpl_ip6_frag {
	__u8 nexthdr;
	__u8 reserved;
	__be16 frag_off;
	__be32 id;
};

/* Ethernet plus up to two VLAN tags (802.1ad outer, 802.1Q inner). Returns
 * the ethertype in network order, or 0 when truncated. */
static __always_inline __be16 xdpl_parse_eth(struct xdpl_cursor *c, struct xdpl_pkt *p)
{
	struct ethhdr *eth = c->pos;

	if ((void *)(eth + 1) > c->end)
		return 0;
	c->pos = eth + 1;
	__be16 proto = eth->h_proto;

	p->vlan = XDPL_VLAN_IDX_UNTAGGED;
#pragma unroll
	for (int i = 0; i < 2; i++) {
		if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD))
			break;
		struct xdpl_vlan_hdr *vh = c->pos;

		if ((void *)(vh + 1) > c->end)
			return 0;
		if (i == 0)
			p->vlan = bpf_ntohs(vh->tci) & 0x0fff;
		proto = vh->proto;
		c->pos = vh + 1;
	}
	return proto;
}

static __always_inline int xdpl_parse_ipv4(struct xdpl_cursor *c, struct xdpl_pkt *p)
{
	struct iphdr *iph = c->pos;

	if ((void *)(iph + 1) > c->end)
		return XDPL_PARSE_MALFORMED;
	if (iph->version != 4 || iph->ihl < 5)
		return XDPL_PARSE_MALFORMED;
	__u32 hlen = iph->ihl * 4;

	if (c->pos + hlen > c->end)
		return XDPL_PARSE_MALFORMED;
	p->family = 4;
	p->proto = iph->protocol;
	p->saddr[0] = iph->saddr;
	p->daddr[0] = iph->daddr;
	c->pos += hlen;
	if (bpf_ntohs(iph->frag_off) & XDPL_IP_OFFMASK)
		p->ports = XDPL_PORTS_FRAG;
	return XDPL_PARSE_OK;
}

static __always_inline int xdpl_parse_ipv6(struct xdpl_cursor *c, struct xdpl_pkt *p)
{
	struct ipv6hdr *ip6 = c->pos;

	if ((void *)(ip6 + 1) > c->end)
		return XDPL_PARSE_MALFORMED;
	if (ip6->version != 6)
		return XDPL_PARSE_MALFORMED;
	p->family = 6;
	__builtin_memcpy(p->saddr, &ip6->saddr, 16);
	__builtin_memcpy(p->daddr, &ip6->daddr, 16);
	c->pos = ip6 + 1;

	__u8 nh = ip6->nexthdr;
#pragma unroll
	for (int i = 0; i < XDPL_MAX_IPV6_EXT; i++) {
		switch (nh) {
		case XDPL_IPV6_HOPOPTS:
		case XDPL_IPV6_ROUTING:
		case XDPL_IPV6_DSTOPTS:
		case XDPL_IPV6_AH: {
			struct xdpl_ip6_ext *ext = c->pos;

			if ((void *)(ext + 1) > c->end)
				return XDPL_PARSE_MALFORMED;
			__u32 len =
			    nh == XDPL_IPV6_AH ? (ext->hdrlen + 2) * 4 : (ext->hdrlen + 1) * 8;

			nh = ext->nexthdr;
			if (c->pos + len > c->end)
				return XDPL_PARSE_MALFORMED;
			c->pos += len;
			break;
		}
		case XDPL_IPV6_FRAGMENT: {
			struct xdpl_ip6_frag *fh = c->pos;

			if ((void *)(fh + 1) > c->end)
				return XDPL_PARSE_MALFORMED;
			nh = fh->nexthdr;
			c->pos = fh + 1;
			/* Offset in the upper 13 bits. */
			if (bpf_ntohs(fh->frag_off) & 0xfff8) {
				p->proto = nh;
				p->ports = XDPL_PORTS_FRAG;
				return XDPL_PARSE_OK;
			}
			break;
		}
		default:
			p->proto = nh;
			return XDPL_PARSE_OK;
		}
	}
	/* Longer chains than any legitimate stack sends: limited as
	 * malformed traffic would be, i.e. passed and counted. */
	return XDPL_PARSE_MALFORMED;
}

static __always_inline int xdpl_parse_l4(struct xdpl_cursor *c, struct xdpl_pkt *p)
{
	if (p->ports == XDPL_PORTS_FRAG)
		return XDPL_PARSE_OK;
	switch (p->proto) {
	case IPPROTO_TCP: {
		/* Ports (4), seq (4), ack (4), data offset (1), flags (1). */
		__u8 *h = c->pos;

		if ((void *)(h + 14) > c->end)
			return XDPL_PARSE_MALFORMED;
		p->tcp_flags = h[13];
		break;
	}
	case IPPROTO_UDP:
	case XDPL_IPPROTO_UDPLITE:
		if (c->pos + 8 > c->end)
			return XDPL_PARSE_MALFORMED;
		break;
	case XDPL_IPPROTO_SCTP:
		if (c->pos + 12 > c->end)
			return XDPL_PARSE_MALFORMED;
		break;
	default:
		p->ports = XDPL_PORTS_NONE;
		return XDPL_PARSE_OK;
	}
	__be16 *ports = c->pos;

	p->sport = bpf_ntohs(ports[0]);
	p->dport = bpf_ntohs(ports[1]);
	p->ports = XDPL_PORTS_OK;
	return XDPL_PARSE_OK;
}

static __always_inline int xdpl_parse(void *data, void *data_end, struct xdpl_pkt *p)
{
	struct xdpl_cursor c = {.pos = data, .end = data_end};
	int r;

	p->len = data_end - data;
	__be16 proto = xdpl_parse_eth(&c, p);

	if (!proto)
		return XDPL_PARSE_MALFORMED;
	if (proto == bpf_htons(ETH_P_IP))
		r = xdpl_parse_ipv4(&c, p);
	else if (proto == bpf_htons(ETH_P_IPV6))
		r = xdpl_parse_ipv6(&c, p);
	else
		return XDPL_PARSE_NOT_IP;
	if (r != XDPL_PARSE_OK)
		return r;
	return xdpl_parse_l4(&c, p);
}

#endif
