/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The IPv4 state table's set (table4.h), the value of xdpl_sources4. */
#ifndef XDPLIMIT_TABLE4_STRUCTS_H
#define XDPLIMIT_TABLE4_STRUCTS_H

#include <linux/types.h>
#include "xdplimit_consts.h"
#include "xdplimit_structs.h"

/* A set of the IPv4 state table (table4.h), which holds per-source levels
 * (XDPL_KEY_SRC) of IPv4 packets, the common key: up to XDPL_WAYS4 keys,
 * each the level's state id << 32 | the source (0: the way is empty; state
 * ids start at 1), each key's stamp (its last use and how many ticks it
 * was used in, table4.h), and their states. lock is taken by an insert:
 * only an insert changes a key. */
struct xdpl_set4 {
	__u64 key[XDPL_WAYS4];
	__u32 used[XDPL_WAYS4];
	__u32 lock;
	__u32 pad[3];
	struct xdpl_state st[XDPL_WAYS4];
};

#endif
