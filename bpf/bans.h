/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Bans: a source prefix whose packets are all dropped until a time.
 *
 * A ban lives in a slot of xdpl_bans, a fixed array that is XDPL_BAN_WAYS-way
 * set associative: a rule's ban goes to a slot of the set its prefix hashes
 * to, the free or expired one, else the one closest to expiry (replaced,
 * counted). The tries map each banned prefix to its slot, so a packet costs
 * one trie lookup whatever prefix lengths are banned, and only the generation
 * flag XDPL_GF_BANS makes the datapath look at all. Expiry is checked here,
 * on the packet path: nothing has to run for a ban to end. */
#ifndef XDPLIMIT_BANS_H
#define XDPLIMIT_BANS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "xdplimit_maps.h"
#include "clock.h"
#include "counters.h"
#include "hash.h"
#include "ban_epoch.h"

/* Sets in xdpl_bans minus one; set by the loader from the map's size. */
volatile const __u32 xdpl_ban_set_mask = (XDPL_MAX_BANS / XDPL_BAN_WAYS) - 1;

/* The slot a trie gives for address a (4 or 16 bytes), or NULL. Each trie
 * keeps its own call site (the empty asm; see xdpl_lookup in levels.h). */
static __always_inline __u32 *xdpl_ban_slot(__u8 family, const __be32 *a, __u32 prefixlen)
{
	if (family == 4) {
		struct xdpl_ban_key4 k = {.prefixlen = prefixlen};

		__builtin_memcpy(k.addr, a, 4);
		__u32 *s = bpf_map_lookup_elem(&xdpl_ban4, &k);

		asm volatile("" : "+r"(s));
		return s;
	}
	struct xdpl_ban_key6 k = {.prefixlen = prefixlen};

	__builtin_memcpy(k.addr, a, 16);
	return bpf_map_lookup_elem(&xdpl_ban6, &k);
}

/* The packet source's live ban, or NULL. The clock is read only when a
 * trie holds a prefix of the source. */
static __always_inline struct xdpl_ban *xdpl_banned(struct xdpl_pkt *p)
{
	__u32 *slot = xdpl_ban_slot(p->family, p->saddr, p->family == 4 ? 32 : 128);

	if (!slot)
		return NULL;
	__u32 s = *slot;
	struct xdpl_ban *b = bpf_map_lookup_elem(&xdpl_bans, &s);

	if (!b || b->family != p->family)
		return NULL;
	struct xdpl_clk clk;

	xdpl_clk_start(&clk);

	if ((__s64)(b->expires_ns - xdpl_now(&clk, 0)) <= 0)
		return NULL;
	return b;
}

/* k holds the prefix of a ban (its slot's key in a trie, the IPv4 one
 * reading only its first 8 bytes: struct xdpl_ban_key4's layout). One
 * buffer for every trie access of xdpl_ban_start keeps its stack small: it
 * is called from xdpl_main, and the two frames share 512 bytes. */
static __always_inline void xdpl_ban_key(struct xdpl_ban_key6 *k, const __u8 *addr, __u32 prefixlen)
{
	k->prefixlen = prefixlen;
	__builtin_memcpy(k->addr, addr, 16);
}

/* a = the source address src masked to its first bits, a word at a time
 * and without a branch (the bits of word i kept are bits - 32i, clamped to
 * 0..32). a is 4-byte aligned (the address in xdpl_ban and in the trie
 * keys). Words, not bytes: the byte loop's sixteen masks spilled, and this
 * function's frame adds to xdpl_main's. */
static __always_inline void xdpl_ban_prefix(__u8 *a, const __be32 *src, __u32 bits)
{
	__u32 *w = (__u32 *)a;

#pragma unroll
	for (int i = 0; i < 4; i++) {
		__s32 keep = (__s32)bits - i * 32;

		keep = keep < 0 ? 0 : keep;
		keep = keep > 32 ? 32 : keep;
		w[i] = src[i] & bpf_htonl((__u32)(0xffffffff00000000ULL >> keep));
	}
}

/* The slot the family's trie gives for the prefix in k, or NULL. */
static __always_inline __u32 *xdpl_ban_trie_find(__u8 family, struct xdpl_ban_key6 *k)
{
	if (family == 4) {
		__u32 *s = bpf_map_lookup_elem(&xdpl_ban4, k);

		asm volatile("" : "+r"(s));
		return s;
	}
	return bpf_map_lookup_elem(&xdpl_ban6, k);
}

/* Forgets the trie entry of the ban in slot s, if it still points there
 * (a race may have pointed it at another slot since). Uses k. */
static __always_inline void xdpl_ban_unlink(struct xdpl_ban *old, __u32 s, struct xdpl_ban_key6 *k)
{
	xdpl_ban_key(k, old->addr, old->prefixlen);
	__u32 *cur = xdpl_ban_trie_find(old->family, k);

	if (!cur || *cur != s)
		return;
	if (old->family == 4) {
		long err = bpf_map_delete_elem(&xdpl_ban4, k);

		asm volatile("" : "+r"(err));
		return;
	}
	bpf_map_delete_elem(&xdpl_ban6, k);
}

/* The slot for a new ban of prefix (a, bits) in its set: the free or
 * expired one, else the one closest to expiry. Replacing a live ban is
 * counted: the table is full there, and the ban that ends first goes. */
static __always_inline __u32 xdpl_ban_victim(const __u8 *a, __u8 family, __u32 bits, __u64 now)
{
	__u64 h = xdpl_fmix64(((__u64)family << 8 | bits) ^ *(const __u32 *)a);

	if (family == 6) {
		h = xdpl_fmix64(h ^ *(const __u32 *)(a + 4));
		h = xdpl_fmix64(h ^ *(const __u32 *)(a + 8));
		h = xdpl_fmix64(h ^ *(const __u32 *)(a + 12));
	}
	__u32 base = (h & xdpl_ban_set_mask) * XDPL_BAN_WAYS;
	__u32 best = base;
	__s64 least = 0x7fffffffffffffffLL;

#pragma unroll
	for (int i = 0; i < XDPL_BAN_WAYS; i++) {
		__u32 s = base + i;
		struct xdpl_ban *b = bpf_map_lookup_elem(&xdpl_bans, &s);

		if (!b)
			continue;
		__s64 left = (__s64)(b->expires_ns - now);

		if (b->expires_ns == 0 || left <= 0)
			return s;
		if (left < least) {
			least = left;
			best = s;
		}
	}
	xdpl_count(XDPL_C_BAN_REPLACED, 0);
	return best;
}

/* Bans the packet's source prefix (bits long) for ban_ns, for the rule
 * whose counter slot is origin (the packet that exceeded it). shadow: the
 * ban is recorded and counted, never enforced. A prefix already banned (an
 * expired ban, or one in shadow) keeps its slot.
 *
 * A global function, verified once on its own and called only when a ban
 * starts: inlined at the rule's verdict, its branches multiplied the states
 * the verifier walks through the rest of the program (~300k instructions
 * more). Scalars and the packet on the caller's stack are what a global
 * function can take. */
__attribute__((noinline)) int xdpl_ban_start(struct xdpl_pkt *p, __u32 bits, __u64 ban_ns,
					     __u32 origin, __u32 shadow)
{
	if (!p)
		return 0;
	struct xdpl_clk clk;

	xdpl_clk_start(&clk);
	__u64 now = xdpl_now(&clk, 0);
	__u8 family = p->family;
	struct xdpl_ban_key6 k = {};

	bits &= 0xff;
	xdpl_ban_prefix(k.addr, p->saddr, bits);
	k.prefixlen = bits;
	__u32 s;
	__u32 *cur = xdpl_ban_trie_find(family, &k);
	struct xdpl_ban *b = NULL;

	if (cur) {
		s = *cur;
		b = bpf_map_lookup_elem(&xdpl_bans, &s);
		if (b && (b->family != family || b->prefixlen != bits ||
			  __builtin_memcmp(b->addr, k.addr, 16) != 0))
			b = NULL; /* a shorter prefix's ban, not this one */
		/* A live ban of the prefix stays as it is (its end and its
		 * count): the rules still judge a source banned in shadow,
		 * and its refusals must not extend the ban as a real one's
		 * never reach them. A real ban replaces one in shadow. */
		if (b && b->expires_ns > now && (!(b->flags & XDPL_BF_SHADOW) || shadow))
			return 0;
	}
	if (!b) {
		s = xdpl_ban_victim(k.addr, family, bits, now);
		b = bpf_map_lookup_elem(&xdpl_bans, &s);
		if (!b)
			return 0;
		if (b->expires_ns)
			xdpl_ban_unlink(b, s, &k);
	}
	/* k may hold the replaced ban's prefix now: this one's is b's. */
	b->family = family;
	b->prefixlen = bits;
	/* Computed again, not kept: keeping the 16 byte masks from k's
	 * prefix spilled them, and this frame adds to xdpl_main's. */
	asm volatile("" : "+r"(bits));
	xdpl_ban_prefix(b->addr, p->saddr, bits);
	b->origin = origin;
	b->flags = shadow ? XDPL_BF_SHADOW : 0;
	b->dropped = 0;
	b->reason[0] = 0;
	b->started_ns = now;
	b->expires_ns = now + ban_ns;
	xdpl_ban_key(&k, b->addr, bits);
	long err;

	/* Each trie its own call site (the empty asm: clang would merge the
	 * two calls into one with a chosen map, which costs the verifier's
	 * inlining; see xdpl_lookup in levels.h). */
	if (family == 4) {
		err = bpf_map_update_elem(&xdpl_ban4, &k, &s, BPF_ANY);
		asm volatile("" : "+r"(err));
	} else {
		err = bpf_map_update_elem(&xdpl_ban6, &k, &s, BPF_ANY);
	}

	/* The packet is dropped all the same; a trie too full for the ban
	 * (only races can fill it) is counted, not silent. */
	if (err)
		xdpl_count(XDPL_C_INSERT_FAIL, 0);
	xdpl_count(XDPL_C_BAN_STARTED, 0);
	/* After the ban is in place: what every CPU's flow cache learned
	 * before it is void (flows.h). */
	xdpl_ban_epoch_move();
	return 0;
}

#endif
