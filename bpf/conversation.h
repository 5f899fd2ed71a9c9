/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Conversation checks: a packet addressed to this host must belong to a
 * conversation the host has, proved by the kernel's own socket tables.
 *   - TCP without SYN (ACK, FIN, RST, data, and a SYN-ACK) must reach an
 *     established, time-wait or half-open socket, or a listener with an
 *     ACK that carries a valid SYN cookie of this host's kernel; the stack
 *     answers anything else with a reset, or drops it.
 *   - UDP must reach a bound socket; the stack answers anything else with
 *     an ICMP port unreachable.
 * What fails is dropped (no_connection, no_socket) before the rules.
 *
 * What is addressed to this host is judged by its sockets: a destination
 * found in xdpl_local, the local routing table's addresses and prefixes,
 * which the control plane keeps there. bpf_fib_lookup cannot tell: on an
 * interface that does not forward (a server's), it answers "forwarding
 * disabled" before it looks at the destination. What the host forwards, or
 * bridges to containers, passes untouched, as do broadcasts and
 * multicasts, which the local table does not hold as local; unless the
 * policy asks the TCP check or the reflection guard to judge it by
 * conntrack (conntrack.h): a forwarded segment without SYN, or a
 * forwarded datagram from a reflector's port, must then have an entry.
 *
 * Each check is on always, or armed by the control plane while an attack
 * lasts. A check that is not armed looks up one packet in
 * XDPL_CONV_WATCH_EVERY per CPU and counts what it would have dropped in
 * its watch, by destination slot: the control plane arms it when a
 * destination's rate there crosses the policy's threshold. */
#ifndef XDPLIMIT_CONVERSATION_H
#define XDPLIMIT_CONVERSATION_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <linux/in.h>
#include "xdplimit_maps.h"
#include "parsing_defs.h"
#include "counters.h"
#include "hash.h"
#include "syncookie.h"
#include "account.h"
#include "flows.h"
#include "clock.h"
#include "reply.h"
#include "conntrack.h"
#include <linux/udp.h>

enum {
	XDPL_CONV_OK = 0,	     /* owned, not ours to judge, or not looked up */
	XDPL_CONV_NO_CONNECTION = 1, /* TCP that no socket owns */
	XDPL_CONV_NO_SOCKET = 2,     /* UDP to a port without a socket */
	XDPL_CONV_NO_REQUEST = 3,    /* a reflector's answer to no request sent */
};

/* Whether port is one of generation gen's reflector ports. */
static __always_inline int xdpl_reflector(__u32 gen, __u16 port)
{
	__u32 k = (gen & 1) * XDPL_REFLECTOR_WORDS + (port >> 6);
	__u64 *w = bpf_map_lookup_elem(&xdpl_reflectors, &k);

	return w && (*w >> (port & 63)) & 1;
}

/* The 16 bits at byte at of the transport header (a DNS message's ID
 * behind a UDP header, an echo's identifier in an ICMP header), behind at
 * most XDPL_REPLY_MAX_TAGS VLAN tags, IPv4 unfragmented or IPv6 without
 * extension headers: 0, or -1 for another shape or a packet too short. */
static __always_inline int xdpl_l4_u16(struct xdp_md *ctx, __u32 at, __u16 *v)
{
	__u32 off;
	__be16 proto;
	__u8 ihl;

	if (xdpl_l3_at(ctx, &off, &proto))
		return -1;
	if (proto == bpf_htons(ETH_P_IP)) {
		if (bpf_xdp_load_bytes(ctx, off, &ihl, 1))
			return -1;
		off += (ihl & 0xf) * 4;
	} else {
		off += sizeof(struct ipv6hdr);
	}
	__be16 id;

	if (bpf_xdp_load_bytes(ctx, off + at, &id, 2))
		return -1;
	*v = bpf_ntohs(id);
	return 0;
}

/* Whether p is an ICMP or ICMPv6 echo reply. */
static __always_inline int xdpl_echo_reply(struct xdpl_pkt *p)
{
	if (p->icmp != XDPL_ICMP_OK || p->icmp_code != 0)
		return 0;
	return (p->proto == IPPROTO_ICMP && p->icmp_type == 0) ||
	       (p->proto == XDPL_IPPROTO_ICMPV6 && p->icmp_type == 129);
}

/* Whether a datagram from a reflector's port, or an echo reply, answers a
 * request this host sent there within the window (egress.bpf.c recorded
 * it); a DNS answer must carry the recorded query ID, an echo reply the
 * request's identifier. One whose ID cannot be read is taken as
 * answering: nothing proves it does not. */
static __always_inline int xdpl_requested(struct xdp_md *ctx, struct xdpl_pkt *p,
					  struct xdpl_gen_cfg *g)
{
	struct xdpl_request_key k = {.family = p->family, .proto = p->proto};

	__builtin_memcpy(k.raddr, p->saddr, 16);
	__builtin_memcpy(k.laddr, p->daddr, 16);
	if (p->proto == IPPROTO_UDP) {
		k.rport = p->sport;
		k.lport = p->dport;
		if (p->sport == 53 && xdpl_l4_u16(ctx, sizeof(struct udphdr), &k.dns_id))
			return 1;
	} else if (xdpl_l4_u16(ctx, 4, &k.lport)) {
		return 1;
	}
	__u64 *sent = bpf_map_lookup_elem(&xdpl_requests, &k);

	if (!sent)
		return 0;
	struct xdpl_clk clk;

	xdpl_clk_start(&clk);
	/* Signed: the egress program may have stored a later time since. */
	return (__s64)(xdpl_now(&clk, XDPL_LF_FINE_CLOCK) - *sent) < (__s64)g->refl_window_ns;
}

/* Whether the packet's destination is one of this host's addresses. */
static __always_inline int xdpl_local_dest(struct xdpl_pkt *p)
{
	struct xdpl_local_key k = {.prefixlen = 128};

	if (p->family == 4) {
		k.addr[10] = 0xff;
		k.addr[11] = 0xff;
		__builtin_memcpy(&k.addr[12], &p->daddr[0], 4);
	} else {
		__builtin_memcpy(k.addr, p->daddr, 16);
	}
	return bpf_map_lookup_elem(&xdpl_local, &k) != NULL;
}

/* Whether a TCP segment without SYN (or a SYN-ACK) belongs to a socket. A
 * listener owns only an ACK carrying a valid cookie: it resets any other
 * ACK, and drops the rest. A segment whose headers the cookie check does
 * not find is taken as owned: nothing proves it is not. */
static __always_inline int xdpl_tcp_owned(struct xdp_md *ctx, struct xdpl_pkt *p)
{
	struct bpf_sock_tuple t = {};
	__u32 tlen = xdpl_sock_tuple(p, &t);
	struct bpf_sock *sk = bpf_skc_lookup_tcp(ctx, &t, tlen, BPF_F_CURRENT_NETNS, 0);

	if (!sk)
		return 0;
	int listener = sk->state == BPF_TCP_LISTEN;

	bpf_sk_release(sk);
	if (!listener)
		return 1;
	if ((p->tcp_flags & (XDPL_TCP_SYN | XDPL_TCP_ACK | XDPL_TCP_RST)) != XDPL_TCP_ACK)
		return 0;
	return xdpl_kernel_cookie(ctx) != 0;
}

/* Whether a UDP datagram reaches a socket, bound or connected. */
static __always_inline int xdpl_udp_owned(struct xdp_md *ctx, struct xdpl_pkt *p)
{
	struct bpf_sock_tuple t = {};
	__u32 tlen = xdpl_sock_tuple(p, &t);
	struct bpf_sock *sk = bpf_sk_lookup_udp(ctx, &t, tlen, BPF_F_CURRENT_NETNS, 0);

	if (!sk)
		return 0;
	bpf_sk_release(sk);
	return 1;
}

/* Counts a packet the check drops (weight 1) or would drop (the watch's
 * sampling weight) in its destination's slot of this CPU's watch. */
static __always_inline void xdpl_conv_watch_count(struct xdpl_pkt *p, __u32 check, __u64 weight)
{
	__u32 a = p->daddr[0] ^ p->daddr[1] ^ p->daddr[2] ^ p->daddr[3];
	__u32 k = check * XDPL_CONV_SLOTS +
		  (xdpl_fmix64((__u64)a << 24 | (__u64)p->proto << 16 | p->dport) &
		   (XDPL_CONV_SLOTS - 1));
	struct xdpl_conv_watch *w = bpf_map_lookup_elem(&xdpl_conv_watch, &k);

	if (!w)
		return;
	w->packets += weight;
	__builtin_memcpy(w->daddr, p->daddr, 16);
	w->dport = p->dport;
	w->family = p->family;
	w->proto = p->proto;
}

/* Looks p up against the checks gflags turns on: XDPL_CONV_*. A datagram
 * from a reflector's service port meets the reflection guard; one to a
 * reflector's port is a request or a server's exchange (DNS servers
 * query each other from port 53, NTP peers talk 123 to 123), which the
 * guard leaves alone, as it does whatever is not to this host. */
static __always_inline int xdpl_conv_lookup(struct xdp_md *ctx, struct xdpl_pkt *p,
					    struct xdpl_gen_cfg *g, __u32 gen)
{
	__u32 zero = 0, check, always, ct, gflags = g->flags;

	if ((gflags & XDPL_GF_CONV_ECHO) && xdpl_echo_reply(p)) {
		check = XDPL_CONV_REFLECTION;
		always = gflags & XDPL_GF_CONV_REFL_ALWAYS;
		ct = 0; /* conntrack looks up TCP and UDP only */
	} else if (p->ports != XDPL_PORTS_OK) {
		return XDPL_CONV_OK;
	} else if (p->proto == IPPROTO_UDP && (gflags & XDPL_GF_CONV_REFL) &&
		   xdpl_reflector(gen, p->sport) && !xdpl_reflector(gen, p->dport)) {
		check = XDPL_CONV_REFLECTION;
		always = gflags & XDPL_GF_CONV_REFL_ALWAYS;
		ct = gflags & XDPL_GF_CONV_REFL_CT;
	} else if (p->proto == IPPROTO_TCP && (gflags & XDPL_GF_CONV_TCP)) {
		/* A SYN opens a conversation: the rules and cookies judge it. */
		if ((p->tcp_flags & (XDPL_TCP_SYN | XDPL_TCP_ACK)) == XDPL_TCP_SYN)
			return XDPL_CONV_OK;
		check = XDPL_CONV_TCP;
		always = gflags & XDPL_GF_CONV_TCP_ALWAYS;
		ct = gflags & XDPL_GF_CONV_TCP_CT;
	} else if (p->proto == IPPROTO_UDP && (gflags & XDPL_GF_CONV_UDP)) {
		check = XDPL_CONV_UDP;
		always = gflags & XDPL_GF_CONV_UDP_ALWAYS;
		ct = 0; /* a forwarded datagram may open a flow */
	} else {
		return XDPL_CONV_OK;
	}
	struct xdpl_conv_ctl *ctl = bpf_map_lookup_elem(&xdpl_conv_ctl, &zero);
	int armed = always || (ctl && (ctl->armed & (1 << check)));

	if (!armed) {
		__u64 *tick = bpf_map_lookup_elem(&xdpl_conv_ticks, &check);

		if (!tick || (++*tick & (XDPL_CONV_WATCH_EVERY - 1)))
			return XDPL_CONV_OK;
	}
	int local = xdpl_local_dest(p);

	if (!local && !ct)
		return XDPL_CONV_OK;
	xdpl_count(XDPL_C_CONV_LOOKUPS, p->len);
	int owned;

	if (!local)
		owned = xdpl_ct_lookup(ctx, p) != XDPL_CT_NONE;
	else if (check == XDPL_CONV_REFLECTION)
		owned = xdpl_requested(ctx, p, g);
	else if (check == XDPL_CONV_TCP)
		owned = xdpl_tcp_owned(ctx, p);
	else
		owned = xdpl_udp_owned(ctx, p);
	if (owned)
		return XDPL_CONV_OK;
	xdpl_conv_watch_count(p, check, armed ? 1 : XDPL_CONV_WATCH_EVERY);
	if (!armed)
		return XDPL_CONV_OK;
	if (check == XDPL_CONV_REFLECTION)
		return XDPL_CONV_NO_REQUEST;
	return check == XDPL_CONV_TCP ? XDPL_CONV_NO_CONNECTION : XDPL_CONV_NO_SOCKET;
}

/* The conversation stage: 1 when it judged p (dropped it, or in a policy
 * in shadow passed it as a drop would have been), filling j; 0 when the
 * next stage judges. A check in shadow counts and samples what it would
 * drop and lets the rules judge, as a ban in shadow does: they must still
 * drop what they drop. A global function, verified once: the judgement it
 * writes is one unknown to the main program's verification, not a path
 * per outcome. */
/* What a check's failure is called: its reason, sample level, counters
 * (drop, shadow) and shadow flag. */
struct xdpl_conv_outcome {
	__u32 why, level, c_drop, c_shadow, shadow_flag;
};

static __always_inline struct xdpl_conv_outcome xdpl_conv_outcome_of(int r)
{
	if (r == XDPL_CONV_NO_CONNECTION)
		return (struct xdpl_conv_outcome){XDPL_WHY_NO_CONNECTION, XDPL_SAMPLE_NO_CONNECTION,
						  XDPL_C_NO_CONNECTION, XDPL_C_NO_CONNECTION_SHADOW,
						  XDPL_GF_CONV_TCP_SHADOW};
	if (r == XDPL_CONV_NO_SOCKET)
		return (struct xdpl_conv_outcome){XDPL_WHY_NO_SOCKET, XDPL_SAMPLE_NO_SOCKET,
						  XDPL_C_NO_SOCKET, XDPL_C_NO_SOCKET_SHADOW,
						  XDPL_GF_CONV_UDP_SHADOW};
	return (struct xdpl_conv_outcome){XDPL_WHY_NO_REQUEST, XDPL_SAMPLE_NO_REQUEST,
					  XDPL_C_NO_REQUEST, XDPL_C_NO_REQUEST_SHADOW,
					  XDPL_GF_CONV_REFL_SHADOW};
}

__attribute__((noinline)) int xdpl_conversation(struct xdp_md *ctx, struct xdpl_pkt *p,
						struct xdpl_gen_cfg *g, struct xdpl_flow_tag *tag,
						struct xdpl_judgement *j)
{
	if (!p || !g || !tag || !j)
		return 0;
	__u32 gflags = g->flags;
	int r = xdpl_conv_lookup(ctx, p, g, g->index);

	if (r == XDPL_CONV_OK)
		return 0;
	struct xdpl_conv_outcome o = xdpl_conv_outcome_of(r);

	if (gflags & XDPL_GF_SHADOW) {
		xdpl_judged(j, o.why, XDPL_V_SHADOW, o.c_shadow, XDPL_SAMPLE_CONV);
	} else if (gflags & o.shadow_flag) {
		xdpl_count(o.c_shadow, p->len);
		xdpl_sample(p, XDPL_V_SHADOW, XDPL_SAMPLE_CONV, o.level, g->sample_mask);
		tag->seq = 0; /* the flow cache must not skip this count */
		return 0;
	} else {
		xdpl_judged(j, o.why, XDPL_V_DROP, o.c_drop, XDPL_SAMPLE_CONV);
	}
	j->origin = o.level;
	return 1;
}

#endif
