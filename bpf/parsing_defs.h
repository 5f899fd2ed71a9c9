/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* What the parser's stages share: the results and the states of the
 * packet's ports field that the rest of the program reads too, protocol
 * numbers, and the cursor through which every header is read, checked
 * against the IP end and the frame. */
#ifndef XDPLIMIT_PARSING_DEFS_H
#define XDPLIMIT_PARSING_DEFS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include "xdplimit_consts.h"
#include "xdplimit_structs.h"

#ifndef ETH_P_8021AD
#define ETH_P_8021AD 0x88A8
#endif
#define XDPL_IPPROTO_SCTP    132
#define XDPL_IPPROTO_UDPLITE 136
#define XDPL_IPPROTO_ICMPV6  58
#define XDPL_IPV6_HOPOPTS    0
#define XDPL_IPV6_ROUTING    43
#define XDPL_IPV6_FRAGMENT   44
#define XDPL_IPV6_AH	     51
#define XDPL_IPV6_DSTOPTS    60
#define XDPL_IPV6_MOBILITY   135
#define XDPL_IPV6_HIP	     139
#define XDPL_IPV6_SHIM6	     140
#define XDPL_IPV6_EXP1	     253
#define XDPL_IPV6_EXP2	     254
#define XDPL_IP_MF	     0x2000
#define XDPL_IP_OFFMASK	     0x1fff
/* No XDP frame without frags support is longer than a page; offsets are
 * clamped to this so that the verifier can bound the cursor. */
#define XDPL_MAX_FRAME 8192

enum xdpl_parse_result {
	XDPL_PARSE_OK = 0,
	XDPL_PARSE_NOT_IP = 1,
	XDPL_PARSE_UNPARSED = 2, /* p->unparsed says why */
};

enum xdpl_ports {
	XDPL_PORTS_NONE = 0, /* protocol without ports */
	XDPL_PORTS_OK = 1,
	XDPL_PORTS_FRAG = 2, /* fragment or long chain: ports unknown */
};

/* How a bounded walk (VLAN tags, IPv6 extension headers) ended. */
enum {
	XDPL_WALK_DONE = 0,	 /* the next header is not one the walk follows */
	XDPL_WALK_TRUNCATED = 1, /* a header runs past the frame or the IP end */
	XDPL_WALK_LONG = 2,	 /* the bound reached and more follow */
};

/* Offsets from the start of the frame: off is the next header, lim the end
 * of the IP packet (never beyond the frame). */
struct xdpl_cursor {
	void *data;
	void *end;
	__u32 off;
	__u32 lim;
	__u8 frag; /* any fragment, first included: the stack reassembles */
};

static __always_inline int xdpl_unparsed_kind(struct xdpl_pkt *p, __u8 kind)
{
	p->unparsed = kind + 1;
	return XDPL_PARSE_UNPARSED;
}

/* A pointer to n bytes at c->off, or NULL when they run past the IP end
 * (or the frame: the second check is the one the verifier needs). */
static __always_inline void *xdpl_at(struct xdpl_cursor *c, __u32 n)
{
	__u32 off = c->off;

	if (off > XDPL_MAX_FRAME || off + n > c->lim)
		return NULL;
	/* The bound again, on the register the pointer is built from: under
	 * register pressure clang reloads off from the stack after the test,
	 * and 6.1's verifier keeps no bound on a 32-bit reload (the pointer
	 * then has no range). The barrier keeps clang from dropping the mask,
	 * which the test makes a no-op. */
	asm volatile("" : "+r"(off));
	void *ptr = c->data + (off & (2 * XDPL_MAX_FRAME - 1));

	if (ptr + n > c->end)
		return NULL;
	return ptr;
}

#endif
