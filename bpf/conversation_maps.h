/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The conversation checks' maps (conversation.h, egress.bpf.c). Included
 * by xdplimit_maps.h: every program's object declares every map. */
#ifndef XDPLIMIT_CONVERSATION_MAPS_H
#define XDPLIMIT_CONVERSATION_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "xdplimit_consts.h"
#include "conversation_structs.h"

/* Conversation checks (conversation.h): this host's local addresses, kept
 * by the control plane from the local routing table; which checks are
 * armed; each check's per-CPU watch of what it drops, by destination slot;
 * and each CPU's count of packets a check that is not armed passed by. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, XDPL_LOCAL_MAX);
	__type(key, struct xdpl_local_key);
	__type(value, __u8);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} xdpl_local SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xdpl_conv_ctl);
} xdpl_conv_ctl SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, XDPL_CONV_CHECKS *XDPL_CONV_SLOTS);
	__type(key, __u32);
	__type(value, struct xdpl_conv_watch);
} xdpl_conv_watch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, XDPL_CONV_CHECKS);
	__type(key, __u32);
	__type(value, __u64);
} xdpl_conv_ticks SEC(".maps");

/* The reflection guard (conversation.h, egress.bpf.c): each generation's
 * reflector ports, and the requests sent to them (the time of the last). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XDPL_GENS *XDPL_REFLECTOR_WORDS);
	__type(key, __u32);
	__type(value, __u64);
} xdpl_reflectors SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, XDPL_REQUESTS_MAX);
	__type(key, struct xdpl_request_key);
	__type(value, __u64);
} xdpl_requests SEC(".maps");

#endif
