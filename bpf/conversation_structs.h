/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The conversation checks' map keys and values (conversation.h,
 * egress.bpf.c), shared with Go through bpf2go. */
#ifndef XDPLIMIT_CONVERSATION_STRUCTS_H
#define XDPLIMIT_CONVERSATION_STRUCTS_H

#include <linux/types.h>

/* A key of xdpl_local: an address or prefix of this host's local routing
 * table, IPv4 as an IPv4-mapped IPv6 address (::ffff:a.b.c.d, prefixlen
 * 96 + the IPv4 prefix). */
struct xdpl_local_key {
	__u32 prefixlen;
	__u8 addr[16];
};

/* A request this host sent (egress.bpf.c), as the answer's addresses and
 * ports name it reversed: to a reflector's UDP port (proto 17; dns_id is
 * the query ID of a DNS request, to port 53, 0 otherwise), or an ICMP echo
 * request (proto 1 or 58; rport 0, lport its identifier). */
struct xdpl_request_key {
	__be32 raddr[4];
	__be32 laddr[4];
	__u16 rport;
	__u16 lport;
	__u16 dns_id;
	__u8 family;
	__u8 proto;
};

/* Which conversation checks the control plane armed (1 << XDPL_CONV_*). */
struct xdpl_conv_ctl {
	__u32 armed;
	__u32 pad;
};

/* A slot of a check's watch (per CPU): packets it dropped, or would have
 * (XDPL_CONV_WATCH_EVERY each while not armed), and the last destination. */
struct xdpl_conv_watch {
	__u64 packets;
	__be32 daddr[4];
	__u16 dport;
	__u8 family;
	__u8 proto;
	__u32 pad;
};

#endif
