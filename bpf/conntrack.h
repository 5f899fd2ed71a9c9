/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Conntrack lookups for what a host forwards: a router or load balancer
 * has no socket for the conversations it carries, but netfilter's
 * connection tracking has an entry for each one it saw, in either
 * direction. The kfuncs live in nf_conntrack (a module on most
 * distributions, since 6.0): declared weak, they resolve to nothing where
 * it is not loaded, and the loader then leaves xdpl_conntrack 0, so that
 * the verifier prunes the calls as dead code (bpf_ksym_exists, a load of
 * the kfunc's address, is refused for a module's kfunc by 6.1 and 6.12:
 * "BPF_LD_IMM64 uses reserved fields"). The control plane refuses a policy that asks for
 * conntrack lookups the program cannot make. */
#ifndef XDPLIMIT_CONNTRACK_H
#define XDPLIMIT_CONNTRACK_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <linux/in.h>
#include "parsing_defs.h"
#include "syncookie.h"

/* Opaque: only its existence is read. The kernel's type is checked for
 * compatibility by kind, not by layout. */
struct nf_conn {
	int opaque;
};

/* struct bpf_ct_opts as 6.0 defined it (12 bytes): later kernels take
 * this size too. */
struct xdpl_ct_opts {
	__s32 netns_id;
	__s32 error;
	__u8 l4proto;
	__u8 dir;
	__u8 reserved[2];
};

extern struct nf_conn *bpf_xdp_ct_lookup(struct xdp_md *xdp_ctx, struct bpf_sock_tuple *bpf_tuple,
					 __u32 tuple__sz, struct xdpl_ct_opts *opts,
					 __u32 opts__sz) __ksym __weak;
extern void bpf_ct_release(struct nf_conn *ct) __ksym __weak;

/* Set by the loader: 1 when the kfuncs resolved (maps.ConntrackLookups). */
volatile const __u32 xdpl_conntrack = 0;

enum {
	XDPL_CT_UNKNOWN = -1, /* no conntrack here, or a lookup it refused */
	XDPL_CT_NONE = 0,     /* no entry in either direction */
	XDPL_CT_KNOWN = 1,
};

/* XDPL_CT_KNOWN when conntrack in the receiving device's namespace has
 * an entry for p's TCP or UDP tuple, in either direction. */
static __always_inline int xdpl_ct_lookup(struct xdp_md *ctx, struct xdpl_pkt *p)
{
	if (!xdpl_conntrack)
		return XDPL_CT_UNKNOWN;
	if (p->proto != IPPROTO_TCP && p->proto != IPPROTO_UDP)
		return XDPL_CT_UNKNOWN;
	struct bpf_sock_tuple t = {};
	__u32 tlen = xdpl_sock_tuple(p, &t);
	struct xdpl_ct_opts o = {.netns_id = BPF_F_CURRENT_NETNS, .l4proto = p->proto};
	struct nf_conn *ct = bpf_xdp_ct_lookup(ctx, &t, tlen, &o, sizeof(o));

	if (ct) {
		bpf_ct_release(ct);
		return XDPL_CT_KNOWN;
	}
	/* Only "no such entry" proves anything: another error is a lookup
	 * the kernel refused. */
	return o.error == -2 /* ENOENT */ ? XDPL_CT_NONE : XDPL_CT_UNKNOWN;
}

#endif
