/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The transport header within the IP packet: ports, TCP flags, ICMP type
 * and code (parsing.h). */
#ifndef XDPLIMIT_PARSING_L4_H
#define XDPLIMIT_PARSING_L4_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <linux/in.h>
#include <bpf/bpf_endian.h>
#include "parsing_defs.h"

/* Transport header within the IP packet, checked as tcp_v4_rcv, udp_rcv and
 * their IPv6 twins check it. A fragment's transport header may be cut short
 * (the stack reassembles first): its ports are then unknown, as a non-first
 * fragment's, and its length fields are not checked. */
static __always_inline int xdpl_l4_short(struct xdpl_cursor *c, struct xdpl_pkt *p)
{
	if (c->frag) {
		p->ports = XDPL_PORTS_FRAG;
		return XDPL_PARSE_OK;
	}
	return xdpl_unparsed_kind(p, XDPL_UP_TRUNCATED);
}

/* Where the transport payload starts (hl bytes past the transport
 * header's start) and ends (end, an offset in the frame), for payload
 * matches. Left 0 in a fragment, whose payload the stack reassembles
 * first: classify_payload.h then judges it as matching every payload
 * rule, as a fragment's unknown ports match every port rule. */
static __always_inline void xdpl_payload_at(struct xdpl_cursor *c, struct xdpl_pkt *p, __u32 hl,
					    __u32 end)
{
	__u32 at = c->off + hl;

	if (c->frag)
		return;
	/* A header cut short (ICMP under 8 bytes): no payload. */
	if (at > end)
		at = end;
	p->payload = at;
	p->payload_len = end - at;
}

static __always_inline int xdpl_parse_l4(struct xdpl_cursor *c, struct xdpl_pkt *p)
{
	__be16 *ports;

	if (p->ports == XDPL_PORTS_FRAG)
		return XDPL_PARSE_OK;
	switch (p->proto) {
	case IPPROTO_TCP: {
		__u8 *h = xdpl_at(c, 20);

		if (!h)
			return xdpl_l4_short(c, p);
		ports = (__be16 *)h;
		p->tcp_flags = h[13];
		if (c->frag)
			break;
		__u32 doff = (h[12] >> 4) * 4;

		if (doff < 20)
			return xdpl_unparsed_kind(p, XDPL_UP_BAD_HEADER);
		if (c->off + doff > c->lim)
			return xdpl_unparsed_kind(p, XDPL_UP_TRUNCATED);
		xdpl_payload_at(c, p, doff, c->lim);
		break;
	}
	case IPPROTO_UDP: {
		ports = xdpl_at(c, 8);
		if (!ports)
			return xdpl_l4_short(c, p);
		if (c->frag)
			break;
		__u32 left = c->lim - c->off;
		__u32 ulen = bpf_ntohs(ports[2]);

		/* IPv6 jumbograms carry 0: the IP length counts. */
		if (ulen == 0 && p->family == 6)
			ulen = left;
		if (ulen < 8 || ulen > left)
			return xdpl_unparsed_kind(p, XDPL_UP_BAD_LENGTH);
		/* The stack trims the datagram to its own length. */
		xdpl_payload_at(c, p, 8, c->off + ulen);
		break;
	}
	case XDPL_IPPROTO_UDPLITE:
		ports = xdpl_at(c, 8);
		if (!ports)
			return xdpl_l4_short(c, p);
		xdpl_payload_at(c, p, 8, c->lim);
		break;
	case XDPL_IPPROTO_SCTP:
		ports = xdpl_at(c, 12);
		if (!ports)
			return xdpl_l4_short(c, p);
		xdpl_payload_at(c, p, 12, c->lim);
		break;
	case IPPROTO_ICMP:
	case XDPL_IPPROTO_ICMPV6: {
		/* Type and code, for the icmp match; a header cut short is
		 * judged as matching every icmp rule (the stack drops it). */
		__u8 *h = xdpl_at(c, 2);

		p->ports = XDPL_PORTS_NONE;
		p->icmp = XDPL_ICMP_UNKNOWN;
		if (h) {
			p->icmp = XDPL_ICMP_OK;
			p->icmp_type = h[0];
			p->icmp_code = h[1];
		}
		/* After the 8 bytes every ICMP message starts with. */
		xdpl_payload_at(c, p, 8, c->lim);
		return XDPL_PARSE_OK;
	}
	default:
		p->ports = XDPL_PORTS_NONE;
		xdpl_payload_at(c, p, 0, c->lim);
		return XDPL_PARSE_OK;
	}
	p->sport = bpf_ntohs(ports[0]);
	p->dport = bpf_ntohs(ports[1]);
	p->ports = XDPL_PORTS_OK;
	return XDPL_PARSE_OK;
}

#endif
