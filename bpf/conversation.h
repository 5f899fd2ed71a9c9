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
 * Only what is addressed to this host is judged: a destination found in
 * xdpl_local, the local routing table's addresses and prefixes, which the
 * control plane keeps there. bpf_fib_lookup cannot tell: on an interface
 * that does not forward (a server's), it answers "forwarding disabled"
 * before it looks at the destination. What the host forwards, or bridges
 * to containers, passes untouched, as do broadcasts and multicasts, which
 * the local table does not hold as local.
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

enum {
	XDPL_CONV_OK = 0,	     /* owned, not ours to judge, or not looked up */
	XDPL_CONV_NO_CONNECTION = 1, /* TCP that no socket owns */
	XDPL_CONV_NO_SOCKET = 2,     /* UDP to a port without a socket */
};

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

/* Looks p up against the checks gflags turns on: XDPL_CONV_*. */
static __always_inline int xdpl_conv_lookup(struct xdp_md *ctx, struct xdpl_pkt *p, __u32 gflags)
{
	__u32 zero = 0, check, always;

	if (p->ports != XDPL_PORTS_OK)
		return XDPL_CONV_OK;
	if (p->proto == IPPROTO_TCP && (gflags & XDPL_GF_CONV_TCP)) {
		/* A SYN opens a conversation: the rules and cookies judge it. */
		if ((p->tcp_flags & (XDPL_TCP_SYN | XDPL_TCP_ACK)) == XDPL_TCP_SYN)
			return XDPL_CONV_OK;
		check = XDPL_CONV_TCP;
		always = gflags & XDPL_GF_CONV_TCP_ALWAYS;
	} else if (p->proto == IPPROTO_UDP && (gflags & XDPL_GF_CONV_UDP)) {
		check = XDPL_CONV_UDP;
		always = gflags & XDPL_GF_CONV_UDP_ALWAYS;
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
	if (!xdpl_local_dest(p))
		return XDPL_CONV_OK;
	xdpl_count(XDPL_C_CONV_LOOKUPS, p->len);
	int owned = check == XDPL_CONV_TCP ? xdpl_tcp_owned(ctx, p) : xdpl_udp_owned(ctx, p);

	if (owned)
		return XDPL_CONV_OK;
	xdpl_conv_watch_count(p, check, armed ? 1 : XDPL_CONV_WATCH_EVERY);
	if (!armed)
		return XDPL_CONV_OK;
	return check == XDPL_CONV_TCP ? XDPL_CONV_NO_CONNECTION : XDPL_CONV_NO_SOCKET;
}

/* The conversation stage: 1 when it judged p (dropped it, or in a policy
 * in shadow passed it as a drop would have been), filling j; 0 when the
 * next stage judges. A check in shadow counts and samples what it would
 * drop and lets the rules judge, as a ban in shadow does: they must still
 * drop what they drop. A global function, verified once: the judgement it
 * writes is one unknown to the main program's verification, not a path
 * per outcome. */
__attribute__((noinline)) int xdpl_conversation(struct xdp_md *ctx, struct xdpl_pkt *p,
						struct xdpl_gen_cfg *g, struct xdpl_flow_tag *tag,
						struct xdpl_judgement *j)
{
	if (!p || !g || !tag || !j)
		return 0;
	__u32 gflags = g->flags;
	int r = xdpl_conv_lookup(ctx, p, gflags);

	if (r == XDPL_CONV_OK)
		return 0;
	int tcp = r == XDPL_CONV_NO_CONNECTION;
	__u32 why = tcp ? XDPL_WHY_NO_CONNECTION : XDPL_WHY_NO_SOCKET;
	__u32 level = tcp ? XDPL_SAMPLE_NO_CONNECTION : XDPL_SAMPLE_NO_SOCKET;
	__u32 c_shadow = tcp ? XDPL_C_NO_CONNECTION_SHADOW : XDPL_C_NO_SOCKET_SHADOW;

	if (gflags & XDPL_GF_SHADOW) {
		xdpl_judged(j, why, XDPL_V_SHADOW, c_shadow, XDPL_SAMPLE_CONV);
	} else if (gflags & (tcp ? XDPL_GF_CONV_TCP_SHADOW : XDPL_GF_CONV_UDP_SHADOW)) {
		xdpl_count(c_shadow, p->len);
		xdpl_sample(p, XDPL_V_SHADOW, XDPL_SAMPLE_CONV, level, g->sample_mask);
		tag->seq = 0; /* the flow cache must not skip this count */
		return 0;
	} else {
		xdpl_judged(j, why, XDPL_V_DROP, tcp ? XDPL_C_NO_CONNECTION : XDPL_C_NO_SOCKET,
			    XDPL_SAMPLE_CONV);
	}
	j->origin = level;
	return 1;
}

#endif
