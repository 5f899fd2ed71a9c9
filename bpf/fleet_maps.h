/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The fleet levels' maps (fleet.h, fleet_apply.bpf.c). Included by
 * xdplimit_maps.h: every program's object declares every map. */
#ifndef XDPLIMIT_FLEET_MAPS_H
#define XDPLIMIT_FLEET_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "xdplimit_consts.h"
#include "xdplimit_structs.h"

/* Fleet levels (fleet.h, fleet_apply.bpf.c). Keys reported to the control
 * plane: 16 MiB hold 524k reports (32 bytes each), and the control plane
 * drains it several times per sync. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 24);
} xdpl_fleet_keys SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xdpl_fleet_sync);
} xdpl_fleet_ctl SEC(".maps");

/* The batch xdpl_fleet_apply works on: written, run, read back. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XDPL_FLEET_BATCH);
	__type(key, __u32);
	__type(value, struct xdpl_fleet_op);
} xdpl_fleet_batch SEC(".maps");

/* Per fleet fixed-window level (by state id): the reserve its windows
 * open with. Written by the control plane from the live host count. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, XDPL_GENS *XDPL_MAX_RULES *XDPL_MAX_LEVELS);
	__type(key, __u32);
	__type(value, __u64);
} xdpl_fleet_reserve SEC(".maps");

/* Per fleet token-bucket level: its local share, at the slot of its state
 * id's low bits (an array: the lookup is every admission's, and a hash's
 * cost a quarter of a pass). An entry names its state id; a level whose
 * slot holds another's (1024 state ids apart) has none. Written by the
 * control plane once it knows the live hosts; a level without an entry
 * exchanges every key. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XDPL_FLEET_SHARE_SLOTS);
	__type(key, __u32);
	__type(value, struct xdpl_fleet_share);
} xdpl_fleet_shares SEC(".maps");

#endif
