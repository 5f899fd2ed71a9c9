// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/* xdpl_wipe: zeroes the limiter's large arrays in the kernel, for
 * maps.Limiter.Reset, which returns a loaded limiter's maps to what a new
 * one holds so that a test binary verifies each build of the program once
 * and reuses it. Through the batch syscalls, the admission sketch's
 * millions of cells alone took a second here (a slot costs a copy from user
 * space and an update call), far longer under emulation: longer than the
 * load that Reset saves. Here each slot is one store. Never attached; its
 * own object (gen.LoadWipe), loaded onto the limiter's maps like
 * xdpl_fleet_apply, whose maps header it shares. The smaller arrays, the
 * per-CPU ones (this program would see only its own CPU's values), the
 * hashes and the tries are reset from user space (maps/reset.go). */

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "xdplimit_consts.h"
#include "xdplimit_structs.h"
#include "xdplimit_maps.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define XDPL_WIPE_CB(_name, _type)                                                                 \
	static long xdpl_wipe_##_name(void *map, __u32 *key, _type *v, void *ctx)                  \
	{                                                                                          \
		__builtin_memset(v, 0, sizeof(*v));                                                \
		return 0;                                                                          \
	}

XDPL_WIPE_CB(u64, __u64)
XDPL_WIPE_CB(bitmap, struct xdpl_bitmap)
XDPL_WIPE_CB(state, struct xdpl_state)
XDPL_WIPE_CB(ban, struct xdpl_ban)
XDPL_WIPE_CB(set4, struct xdpl_set4)
XDPL_WIPE_CB(sketch_line, struct xdpl_sketch_line)

SEC("xdp")
int xdpl_wipe(struct xdp_md *ctx)
{
	bpf_for_each_map_elem(&xdpl_sketch_map, xdpl_wipe_sketch_line, NULL, 0);
	bpf_for_each_map_elem(&xdpl_sources4, xdpl_wipe_set4, NULL, 0);
	bpf_for_each_map_elem(&xdpl_reject_sources, xdpl_wipe_u64, NULL, 0);
	bpf_for_each_map_elem(&xdpl_globals, xdpl_wipe_state, NULL, 0);
	bpf_for_each_map_elem(&xdpl_bans, xdpl_wipe_ban, NULL, 0);
	bpf_for_each_map_elem(&xdpl_dport, xdpl_wipe_bitmap, NULL, 0);
	bpf_for_each_map_elem(&xdpl_sport, xdpl_wipe_bitmap, NULL, 0);
	bpf_for_each_map_elem(&xdpl_vlan, xdpl_wipe_bitmap, NULL, 0);
	bpf_for_each_map_elem(&xdpl_iplen, xdpl_wipe_bitmap, NULL, 0);
	return XDP_PASS;
}
