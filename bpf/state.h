/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The state tables: the key a level counts a packet under, and that key's
 * entry, looked up or created (per-source IPv4 keys in the product's own
 * table, table4.h, every other key in an LRU hash), or a global level's
 * entry at its slot. The packet path (levels.h) and the fleet apply
 * program share them. */
#ifndef XDPLIMIT_STATE_H
#define XDPLIMIT_STATE_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <linux/errno.h>
#include "xdplimit_maps.h"
#include "parsing_defs.h"
#include "counters.h"
#include "table4.h"

/* The key packet p counts under at level l: the level's state id and the
 * source masked to the level's prefix, with the port the key kind reads
 * (only the state id for a global level). */
static __always_inline void xdpl_key_of(struct xdpl_level *l, struct xdpl_pkt *p,
					struct xdpl_key *k)
{
	__builtin_memset(k, 0, sizeof(*k));
	k->state_id = l->state_id;
	if (l->key_kind == XDPL_KEY_GLOBAL)
		return;
	k->family = p->family;
	if (p->family == 4) {
		k->addr[0] = p->saddr[0] & l->mask4;
	} else {
#pragma unroll
		for (int i = 0; i < 4; i++)
			k->addr[i] = p->saddr[i] & l->mask6[i];
	}
	if (l->key_kind == XDPL_KEY_SRC_DPORT && p->ports == XDPL_PORTS_OK)
		k->port = p->dport;
	if (l->key_kind == XDPL_KEY_SRC_SPORT && p->ports == XDPL_PORTS_OK)
		k->port = p->sport;
}

/* Whether key k lives in the IPv4 table (per-source IPv4 keys, the common
 * key), not in the generic one. */
static __always_inline int xdpl_in_table4(struct xdpl_key *k)
{
	return k->family == 4 && k->port == 0;
}

/* The word the IPv4 table holds for key k (xdpl_in_table4), and its hash. */
static __always_inline __u64 xdpl_key4(struct xdpl_key *k)
{
	return xdpl_key4_word(k->state_id, k->addr[0]);
}

static __always_inline __u64 xdpl_key4_hash(struct xdpl_key *k)
{
	return xdpl_set4_hash(xdpl_key4(k));
}

/* Key k's entry, or NULL; h is its hash (sketch.h: xdpl_key_hash), or the
 * hash's low half, where it lives in the IPv4 table. The generic table's call site stays apart from
 * anything else that takes a map: the verifier inlines a hash lookup only
 * where one map reaches the call. */
static __always_inline struct xdpl_state *xdpl_lookup_hashed(struct xdpl_key *k, __u64 h)
{
	if (xdpl_in_table4(k)) {
		struct xdpl_set4 *set = xdpl_set4_at(h);

		return set ? xdpl_find4(set, xdpl_key4(k)) : NULL;
	}
	return bpf_map_lookup_elem(&xdpl_sources, k);
}

static __always_inline struct xdpl_state *xdpl_lookup(struct xdpl_key *k)
{
	__u64 h = xdpl_in_table4(k) ? xdpl_key4_hash(k) : 0;

	return xdpl_lookup_hashed(k, h);
}

/* Creates the empty state entry of a key (which every algorithm reads as
 * "nothing consumed"), or finds the one another CPU made meanwhile: two
 * CPUs racing on a new source share one entry. */
static __always_inline struct xdpl_state *xdpl_state_insert(struct xdpl_key *k)
{
	if (xdpl_in_table4(k))
		return xdpl_insert4(xdpl_key4(k));
	struct xdpl_state empty = {};
	long err = bpf_map_update_elem(&xdpl_sources, k, &empty, BPF_NOEXIST);

	if (err == 0)
		xdpl_count(XDPL_C_NEW_SOURCE, 0);
	else if (err != -EEXIST)
		xdpl_count(XDPL_C_INSERT_FAIL, 0);
	return bpf_map_lookup_elem(&xdpl_sources, k);
}

/* A global level's state, at its slot. NULL only for a slot out of range,
 * which the control plane never writes: the level then refuses (fail
 * closed, counted as an insert failure). */
static __always_inline struct xdpl_state *xdpl_global(struct xdpl_level *l)
{
	__u32 slot = l->slot;
	struct xdpl_state *g = bpf_map_lookup_elem(&xdpl_globals, &slot);

	if (!g)
		xdpl_count(XDPL_C_INSERT_FAIL, 0);
	return g;
}

#endif
