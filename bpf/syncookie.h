/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* SYN cookies from XDP. A rule with action syncookie answers the SYNs its
 * levels refuse with a SYN-ACK whose sequence number is the kernel's own
 * SYN cookie (bpf_tcp_raw_gen_syncookie_*), sent back out of the interface
 * (XDP_TX); the SYN goes no further. The client's ACK to a listener is
 * checked against the cookies here, and passed only when it is valid; the
 * listener, in tcp_syncookies=2 mode, validates it again and opens the
 * connection without a SYN queue entry.
 *
 * The SYN-ACK is what the host's stack would send (xdpl_synack_cfg, read
 * by the control plane from the interface's MTU and the sysctls): the MSS
 * from the cookie's table, capped by the MTU; with client timestamps, a
 * timestamp whose low bits carry the window scale, SACK and ECN as the
 * kernel's cookies encode them (cookie_init_timestamp), so that they
 * survive; addresses, ports and MACs mirrored, VLAN tags kept as received.
 *
 * Two kernel rules shape the rest:
 *   - a listener validates cookie ACKs only within two minutes of a cookie
 *     it sent itself (tcp_synq_no_recent_overflow), so a refused SYN still
 *     reaches the stack once a second per destination (xdpl_cookie_pass_due),
 *     where tcp_syncookies=2 answers it with a cookie;
 *   - the kernel decodes the options from the echoed timestamp after
 *     subtracting a per-connection offset only it knows, unless
 *     tcp_timestamps=2, which the control plane requires for timestamps. */
#ifndef XDPLIMIT_SYNCOOKIE_H
#define XDPLIMIT_SYNCOOKIE_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_endian.h>
#include "xdplimit_maps.h"
#include "parsing_defs.h"
#include "classify.h"
#include "clock.h"
#include "hash.h"
#include "reply.h"

/* Check TCP ACKs against the cookies (a load-time knob, set from Go; off
 * in pcap replay, which runs where the captured host's listeners are not). */
volatile const __u32 xdpl_cookie_acks_on = 1;

/* The SYN's TCP header and what its options offer, read by
 * xdpl_tcpopt_step one option at a time (a bpf_loop callback: the verifier
 * checks it once, where a loop over the options multiplied its states
 * past its budget). It lives in the answers' per-CPU scratch
 * (xdpl_reply_scratch), not on the stack: verifiers before 6.7 (6.1) walk
 * a bpf_loop callback once, as if it ran once, and what it leaves on the
 * caller's stack keeps the values that one run wrote. A SYN offers SACK,
 * timestamps and window scale in three options, so no single run sets two
 * of them; 6.1 then judged the SACK and window scale of a timestamped
 * SYN-ACK unreachable and wired their branches out of the program. The
 * verifier tracks no values in map memory, so every combination stays. */
struct xdpl_tcpopts {
	__u8 b[64];
	__u32 len;   /* of the header */
	__u32 i;     /* the next option's offset in b */
	__u32 tsval; /* the SYN's timestamp value, network order */
	__u8 ts;
	__u8 sack;
	__u8 ws;
	__u8 wscale;
};

_Static_assert(sizeof(struct xdpl_tcpopts) <= sizeof(struct xdpl_reply_buf),
	       "the options fit the answers' scratch");

/* bpf_loop's context, which must be on the caller's stack: only the way to
 * the options in the scratch. */
struct xdpl_tcpopt_walk {
	struct xdpl_tcpopts *o;
};

static long xdpl_tcpopt_step(__u64 n, void *ctx)
{
	struct xdpl_tcpopts *o = ((struct xdpl_tcpopt_walk *)ctx)->o;
	__u32 i = o->i;

	if (i >= o->len || i >= 60)
		return 1;
	__u8 kind = o->b[i & 63];

	if (kind == 0) /* end of options */
		return 1;
	if (kind == 1) { /* no-op */
		o->i = i + 1;
		return 0;
	}
	__u8 len = o->b[(i + 1) & 63];

	if (len < 2 || i + len > o->len)
		return 1;
	if (kind == 8 && len == 10) {
		o->ts = 1;
		__builtin_memcpy(&o->tsval, &o->b[(i + 2) & 63], 4);
	} else if (kind == 3 && len == 3) {
		__u8 w = o->b[(i + 2) & 63];

		o->ws = 1;
		o->wscale = w > 14 ? 14 : w; /* TCP_MAX_WSCALE, as tcp_parse_options clamps */
	} else if (kind == 4 && len == 2) {
		o->sack = 1;
	}
	o->i = i + len;
	return 0;
}

/* Rewrites the SYN in ctx into its SYN-ACK, in place: 0, or -1 when the
 * SYN is not one to answer (SYN+FIN or RST, which the stack discards; a
 * shape xdpl_segment_at does not follow) or the frame could not be
 * rewritten. A global function, verified once; gen is the generation whose
 * xdpl_synack_cfg applies. */
__attribute__((noinline)) int xdpl_synack(struct xdp_md *ctx, __u32 gen)
{
	__u32 zero = 0;
	struct xdpl_control *ctl = bpf_map_lookup_elem(&xdpl_ctl, &zero);
	struct xdpl_reply_buf *q = bpf_map_lookup_elem(&xdpl_reply_scratch, &zero);
	struct xdpl_segment s;

	if (!ctl || !q || xdpl_segment_at(ctx, &s))
		return -1;
	struct xdpl_tcpopts *o = (struct xdpl_tcpopts *)q->b;
	struct xdpl_tcpopt_walk w = {.o = o};
	struct xdpl_synack_cfg cfg = ctl->gen[gen & 1].synack;
	__u32 thlen = s.thlen;

	/* Checked again here, on the register the helper gets: clang knows
	 * the bounds from xdpl_segment_at and folds them into a shift and a
	 * mask, from which the verifier reads 0..60. */
	asm volatile("" : "+r"(thlen));
	if (thlen < 20 || thlen > 60)
		return -1;
	if (bpf_xdp_load_bytes(ctx, s.l4, o->b, thlen))
		return -1;
	__u8 flags = o->b[13];

	if ((flags & (XDPL_TCP_SYN | XDPL_TCP_ACK | XDPL_TCP_FIN | XDPL_TCP_RST)) != XDPL_TCP_SYN)
		return -1;

	/* The cookie, from the addresses, the ports, the client's sequence
	 * number and MSS: the helpers read the addresses from the IP header
	 * (here a copy of them, where the header has them) and everything
	 * else from the TCP header. */
	__u32 ip[10] = {};
	__s64 v;

	if (xdpl_reply_addrs(ctx, s.l3, s.family, ip))
		return -1;
	if (s.family == 4)
		v = bpf_tcp_raw_gen_syncookie_ipv4((void *)ip, (void *)o->b, thlen);
	else
		v = bpf_tcp_raw_gen_syncookie_ipv6((void *)ip, (void *)o->b, thlen);
	if (v < 0)
		return -1;
	__u32 cookie = (__u32)v;
	__u32 mss = (__u32)(v >> 32);
	__u32 cap = s.family == 4 ? cfg.mss4 : cfg.mss6;

	if (cap && mss > cap)
		mss = cap;

	o->len = thlen;
	o->i = 20;
	o->tsval = 0;
	o->ts = o->sack = o->ws = o->wscale = 0;
	bpf_loop(40, xdpl_tcpopt_step, &w, 0);
	/* Without a timestamp to carry them, a cookie keeps neither SACK nor
	 * the window scale, and the kernel offers neither (tcp_conn_request). */
	int ts = o->ts && (cfg.flags & XDPL_SYNACK_TS);
	int sack = ts && o->sack && (cfg.flags & XDPL_SYNACK_SACK);
	int ws = ts && o->ws && (cfg.flags & XDPL_SYNACK_WSCALE);
	int ecn = ts && (flags & (XDPL_TCP_ECE | XDPL_TCP_CWR)) == (XDPL_TCP_ECE | XDPL_TCP_CWR) &&
		  (cfg.flags & XDPL_SYNACK_ECN);
	__u32 tcplen = 24 + (ts ? 12 : 0) + (ws ? 4 : 0);
	__u32 iplen = s.family == 4 ? 20 : 40;
	__u32 sports, seq, tsecr = o->tsval;
	__u8 wscale = o->wscale;

	__builtin_memcpy(&sports, &o->b[0], 4);
	__builtin_memcpy(&seq, &o->b[4], 4);

	/* The TCP header, in words as they will sit in the frame, over the
	 * SYN's (read above, and not again). */
	__u32 *t = (__u32 *)o->b;

	__builtin_memset(o->b, 0, 40);
	t[0] = sports >> 16 | sports << 16; /* the ports swapped */
	t[1] = bpf_htonl(cookie);
	t[2] = bpf_htonl(bpf_ntohl(seq) + 1);
	/* A window of whole segments, as the stack's first one (65160 for
	 * 1460 with timestamps). */
	__u32 seg = mss - (ts ? 12 : 0);
	__u32 win = seg > 0 && seg < 65536 ? 65535 / seg * seg : 65535;
	__u32 tflags = XDPL_TCP_SYN | XDPL_TCP_ACK | (ecn ? XDPL_TCP_ECE : 0);

	t[3] = bpf_htonl((tcplen / 4) << 28 | tflags << 16 | win);
	t[5] = bpf_htonl(2 << 24 | 4 << 16 | mss);
	if (ts) {
		/* cookie_init_timestamp: the clock in ms with its low 6 bits
		 * replaced by the options, never ahead of now. */
		__u64 now = bpf_ktime_get_ns() / 1000000;
		__u64 opts = (ws ? wscale : 0xf) | (sack ? 0x10 : 0) | (ecn ? 0x20 : 0);
		__u64 tsv = (now & ~0x3fULL) | opts;

		if (tsv > now)
			tsv -= 0x40;
		t[6] = bpf_htonl(sack ? 4 << 24 | 2 << 16 | 8 << 8 | 10
				      : 1 << 24 | 1 << 16 | 8 << 8 | 10);
		t[7] = bpf_htonl((__u32)tsv);
		t[8] = tsecr;
	}
	if (ws)
		t[9] = bpf_htonl(1 << 24 | 3 << 16 | 3 << 8 | cfg.wscale);

	/* The IP header, over the copy of the addresses (each header has them
	 * where the copy does), swapped; and the pseudo-header's sum. */
	__u64 pseudo = xdpl_reply_ip(ip, s.family, IPPROTO_TCP, tcplen,
				     s.family == 4 ? cfg.ttl : cfg.hoplimit, 0);

	__u16 check = xdpl_csum_words(t, tcplen / 4, pseudo);

	__builtin_memcpy(o->b + 16, &check, 2);

	int grow = (int)(s.l3 + iplen + tcplen) - (int)bpf_xdp_get_buff_len(ctx);
	__u32 il = iplen, tl = tcplen;

	asm volatile("" : "+r"(il), "+r"(tl));
	if (il < 20 || il > 40 || tl < 24 || tl > 40)
		return -1;
	if (bpf_xdp_adjust_tail(ctx, grow))
		return -1;
	if (xdpl_reply_macs(ctx) || bpf_xdp_store_bytes(ctx, s.l3, ip, il) ||
	    bpf_xdp_store_bytes(ctx, s.l3 + il, o->b, tl))
		return -1;
	return 0;
}

/* What xdpl_cookie_ack found: the cookie rule the connection's SYN went to
 * (rk, its key in xdpl_rules; slot, its counter slot). */
struct xdpl_cookie_rule {
	__s32 rk;
	__u32 slot;
};

enum {
	XDPL_ACK_NOT_OURS = 0, /* no cookie rule, no listener: the stack judges */
	XDPL_ACK_VALID = 1,
	XDPL_ACK_INVALID = 2,
};

/* The packet's addresses and ports as a socket lookup takes them; returns
 * the size of the family's part of t. */
static __always_inline __u32 xdpl_sock_tuple(struct xdpl_pkt *p, struct bpf_sock_tuple *t)
{
	if (p->family == 4) {
		t->ipv4.saddr = p->saddr[0];
		t->ipv4.daddr = p->daddr[0];
		t->ipv4.sport = bpf_htons(p->sport);
		t->ipv4.dport = bpf_htons(p->dport);
		return sizeof(t->ipv4);
	}
	__builtin_memcpy(t->ipv6.saddr, p->saddr, 16);
	__builtin_memcpy(t->ipv6.daddr, p->daddr, 16);
	t->ipv6.sport = bpf_htons(p->sport);
	t->ipv6.dport = bpf_htons(p->dport);
	return sizeof(t->ipv6);
}

/* Whether the segment's acknowledgment number is a valid SYN cookie of this
 * host's kernel, whoever sent it (the stack, or a cookie rule): 1 valid,
 * 0 not, -1 a shape whose headers xdpl_segment_at does not find. */
static __always_inline int xdpl_kernel_cookie(struct xdp_md *ctx)
{
	struct xdpl_segment s;
	__u32 ip[10] = {};
	__u32 th[5];
	long err;

	if (xdpl_segment_at(ctx, &s) || bpf_xdp_load_bytes(ctx, s.l4, th, 20) ||
	    xdpl_reply_addrs(ctx, s.l3, s.family, ip))
		return -1;
	if (s.family == 4)
		err = bpf_tcp_raw_check_syncookie_ipv4((void *)ip, (void *)th);
	else
		err = bpf_tcp_raw_check_syncookie_ipv6((void *)ip, (void *)th);
	return err ? 0 : 1;
}

/* Whether some cookie rule of generation g may take SYNs to p's port:
 * one array read (the destination port's rules, against g's cookie
 * rules) where the rules name ports, else yes. It spares the ACKs of other
 * ports the socket lookup. */
static __always_inline int xdpl_cookie_port(struct xdpl_gen_cfg *g, __u32 gen, struct xdpl_pkt *p)
{
	if (!(g->dims & XDPL_DIM_DPORT))
		return 1;
	__u32 k = gen * XDPL_PORT_SLOTS + p->dport;
	struct xdpl_bitmap *b = bpf_map_lookup_elem(&xdpl_dport, &k);

	if (!b)
		return 0;
	__u64 any = 0;

#pragma unroll
	for (int i = 0; i < XDPL_BITMAP_WORDS; i++)
		any |= b->w[i] & g->cookie_rules.w[i];
	return any != 0;
}

/* Checks a TCP ACK (no SYN, no RST) against the SYN cookies. An ACK is one
 * to check when its 4-tuple reaches only a listener (a connection in any
 * other state, established, time-wait or a request the stack queued, owns
 * it) and the rule its connection's SYN would have met answers with
 * cookies (the packet classified as that SYN: a pure SYN from the same
 * addresses and ports). The socket lookup comes first, after a test of the
 * port: every segment of an established connection to a cookie port stops
 * there, without classifying the packet again. Counts the result in the
 * rule's cookie_acks. */
__attribute__((noinline)) int xdpl_cookie_ack(struct xdp_md *ctx, struct xdpl_pkt *p, __u32 gen,
					      struct xdpl_cookie_rule *res)
{
	__u32 zero = 0;
	struct xdpl_control *ctl = bpf_map_lookup_elem(&xdpl_ctl, &zero);

	if (!ctl || !p || !res)
		return XDPL_ACK_NOT_OURS;
	gen &= 1;
	struct xdpl_gen_cfg *g = &ctl->gen[gen];

	if (!xdpl_cookie_port(g, gen, p))
		return XDPL_ACK_NOT_OURS;
	struct bpf_sock_tuple t = {};
	__u32 tlen = xdpl_sock_tuple(p, &t);
	struct bpf_sock *sk = bpf_skc_lookup_tcp(ctx, &t, tlen, BPF_F_CURRENT_NETNS, 0);

	if (!sk)
		return XDPL_ACK_NOT_OURS;
	int listener = sk->state == BPF_TCP_LISTEN;

	bpf_sk_release(sk);
	if (!listener)
		return XDPL_ACK_NOT_OURS;
	__u8 flags = p->tcp_flags;

	/* The connection's SYN: no payload. */
	p->tcp_flags = XDPL_TCP_SYN;
	int idx = xdpl_classify(ctx, gen, g, p, 1);

	p->tcp_flags = flags;
	if (idx < 0)
		return XDPL_ACK_NOT_OURS;
	__u32 rk = gen * XDPL_MAX_RULES + idx;
	struct xdpl_rule *r = bpf_map_lookup_elem(&xdpl_rules, &rk);

	if (!r || !(r->flags & XDPL_RF_SYNCOOKIE))
		return XDPL_ACK_NOT_OURS;
	int valid = xdpl_kernel_cookie(ctx);

	if (valid < 0)
		return XDPL_ACK_NOT_OURS;
	__u32 kind = valid ? XDPL_COOKIE_ACK_VALID : XDPL_COOKIE_ACK_INVALID;
	struct xdpl_rule_stats *st = bpf_map_lookup_elem(&xdpl_stats, &r->counter_slot);

	if (st)
		st->cookie_acks[kind & 1]++;
	res->rk = rk;
	res->slot = r->counter_slot;
	return valid ? XDPL_ACK_VALID : XDPL_ACK_INVALID;
}

/* Whether a SYN refused by a cookie rule should reach the stack instead,
 * to keep its listeners accepting cookie ACKs: the first one to its
 * destination (address and port, hashed into XDPL_COOKIE_PASS_SLOTS) in
 * XDPL_COOKIE_PASS_NS. Another CPU racing here passes one more. */
static __always_inline int xdpl_cookie_pass_due(struct xdpl_pkt *p)
{
	__u32 a = p->daddr[0] ^ p->daddr[1] ^ p->daddr[2] ^ p->daddr[3];
	__u32 k = xdpl_fmix64((__u64)a << 16 | p->dport) & (XDPL_COOKIE_PASS_SLOTS - 1);
	__u64 *last = bpf_map_lookup_elem(&xdpl_cookie_pass, &k);
	struct xdpl_clk clk;

	if (!last)
		return 0;
	xdpl_clk_start(&clk);
	__u64 now = xdpl_now(&clk, 0);

	/* Signed: another CPU may have stored a later time since. */
	if (*last && (__s64)(now - *last) < XDPL_COOKIE_PASS_NS)
		return 0;
	*last = now;
	return 1;
}

#endif
