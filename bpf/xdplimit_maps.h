/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Every map of the limiter. Config maps are written by the control plane
 * only; the datapath writes xdpl_sources and the per-CPU counters. */
#ifndef XDPLIMIT_MAPS_H
#define XDPLIMIT_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "xdplimit_structs.h"
#include "conversation_structs.h"
#include "payload_structs.h"
#include "flow_structs.h"
#include "table4_structs.h"
#include "sketch_structs.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xdpl_control);
} xdpl_ctl SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XDPL_GENS *XDPL_MAX_RULES);
	__type(key, __u32);
	__type(value, struct xdpl_rule);
} xdpl_rules SEC(".maps");

/* Classification: each map gives the rules a packet field admits. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XDPL_GENS *XDPL_PROTO_SLOTS);
	__type(key, __u32);
	__type(value, struct xdpl_bitmap);
} xdpl_proto SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XDPL_GENS *XDPL_PORT_SLOTS);
	__type(key, __u32);
	__type(value, struct xdpl_bitmap);
} xdpl_dport SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XDPL_GENS *XDPL_PORT_SLOTS);
	__type(key, __u32);
	__type(value, struct xdpl_bitmap);
} xdpl_sport SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XDPL_GENS *XDPL_TCPF_SLOTS);
	__type(key, __u32);
	__type(value, struct xdpl_bitmap);
} xdpl_tcpf SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XDPL_GENS *XDPL_VLAN_SLOTS);
	__type(key, __u32);
	__type(value, struct xdpl_bitmap);
} xdpl_vlan SEC(".maps");

#define XDPL_LPM_MAP(_name, _key, _value, _max)                                                    \
	struct {                                                                                   \
		__uint(type, BPF_MAP_TYPE_LPM_TRIE);                                               \
		__uint(max_entries, _max);                                                         \
		__uint(map_flags, BPF_F_NO_PREALLOC);                                              \
		__type(key, _key);                                                                 \
		__type(value, _value);                                                             \
	} _name SEC(".maps")

XDPL_LPM_MAP(xdpl_src4, struct xdpl_lpm4, struct xdpl_bitmap, XDPL_MAX_CIDRS);
XDPL_LPM_MAP(xdpl_src6, struct xdpl_lpm6, struct xdpl_bitmap, XDPL_MAX_CIDRS);
XDPL_LPM_MAP(xdpl_dst4, struct xdpl_lpm4, struct xdpl_bitmap, XDPL_MAX_CIDRS);
XDPL_LPM_MAP(xdpl_dst6, struct xdpl_lpm6, struct xdpl_bitmap, XDPL_MAX_CIDRS);
/* allow/deny: the longest matching prefix decides (value XDPL_ACL_*). */
XDPL_LPM_MAP(xdpl_acl4, struct xdpl_lpm4, __u32, XDPL_MAX_ACL);
XDPL_LPM_MAP(xdpl_acl6, struct xdpl_lpm6, __u32, XDPL_MAX_ACL);

/* Limiter state. Shared across CPUs on purpose: a per-CPU bucket admits N
 * times the limit when a source is spread over N queues. Values are updated
 * with compare-and-swap, and the over-limit path only reads, so a flooding
 * source's entry is not bounced between CPUs. Fixed size: per-source IPv4
 * keys in the product's own set-associative table (table4.h), whose insert
 * costs a fraction of a kernel LRU hash's, every other key in an LRU hash
 * (an LRU map cannot hold a bpf_spin_lock, hence the atomics). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	/* Mmapable arrays start their values at a page: a set's keys and its
	 * states are each one aligned cache line. */
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, XDPL_MAX_SOURCES / XDPL_WAYS4);
	__type(key, __u32);
	__type(value, struct xdpl_set4);
} xdpl_sources4 SEC(".maps");

/* Every other key: IPv6 sources and prefixes, src_ip+dst_port. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, XDPL_MAX_OTHER_SOURCES);
	__type(key, struct xdpl_key);
	__type(value, struct xdpl_state);
} xdpl_sources SEC(".maps");

/* The state of `key: global` levels, at the level's slot: one hot entry
 * per level that an array finds with no hashing (the verifier inlines the
 * lookup) and that no flood can evict. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XDPL_GLOBAL_SLOTS);
	__type(key, __u32);
	__type(value, struct xdpl_state);
} xdpl_globals SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, XDPL_COUNTER_SLOTS);
	__type(key, __u32);
	__type(value, struct xdpl_rule_stats);
} xdpl_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, XDPL_NCOUNTERS);
	__type(key, __u32);
	__type(value, struct xdpl_counter);
} xdpl_counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xdpl_drop_ring);
} xdpl_drops SEC(".maps");

/* The sampled drops themselves: one region of xdpl_drop_ring_mask + 1
 * samples per possible CPU, sized at load. Not a per-CPU map, whose values
 * the kernel caps at 32 KiB (512 samples): readers mmap it and copy only
 * the samples written since they last read, so each may keep its own
 * cursor (top and the drop log read at once; a BPF ring buffer has one
 * consumer). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, XDPL_DROP_RING_MIN);
	__type(key, __u32);
	__type(value, struct xdpl_drop_sample);
} xdpl_drop_samples SEC(".maps");

/* Samples of every verdict (traffic.h): the heads, per CPU, and the
 * samples, XDPL_TRAFFIC_RING for each possible CPU (sized at load), read
 * through an mmap as the drop samples are. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xdpl_drop_ring);
} xdpl_traffic SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, XDPL_TRAFFIC_RING);
	__type(key, __u32);
	__type(value, struct xdpl_traffic_sample);
} xdpl_traffic_samples SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xdpl_decision);
} xdpl_last SEC(".maps");

/* The admission sketch: for each CPU a region of XDPL_SKETCH_ROWS rows of
 * xdpl_sketch_width cells, in lines that each hold a key's cells (sketch.h);
 * a cell of another epoch reads as zero, so it never needs clearing. A
 * plain array indexed by CPU rather than a per-CPU map, whose values stop
 * at 32 KiB: a sketch that small saturates within an epoch under a spoofed
 * flood. Each CPU writes only its own region. Sized by the control plane. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	/* Mmapable arrays start their values at a page: each line is one
	 * aligned cache line. */
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 2 * XDPL_SKETCH_ROWS * 2048 / XDPL_SKETCH_LINE_CELLS);
	__type(key, __u32);
	__type(value, struct xdpl_sketch_line);
} xdpl_sketch_map SEC(".maps");

/* Injected time (XDPL_CLOCK_MAP), in ns. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} xdpl_clock SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XDPL_COUNTER_SLOTS);
	__type(key, __u32);
	__type(value, struct xdpl_name);
} xdpl_names SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xdpl_metadata);
} xdpl_meta SEC(".maps");

/* Signature match fields (classify.h): direct arrays like the port maps,
 * one lookup each whatever the rules' ranges. */
#define XDPL_FIELD_MAP(_name, _slots)                                                              \
	struct {                                                                                   \
		__uint(type, BPF_MAP_TYPE_ARRAY);                                                  \
		__uint(max_entries, XDPL_GENS *(_slots));                                          \
		__type(key, __u32);                                                                \
		__type(value, struct xdpl_bitmap);                                                 \
	} _name SEC(".maps")

XDPL_FIELD_MAP(xdpl_iplen, XDPL_LEN_SLOTS);
XDPL_FIELD_MAP(xdpl_ttl, XDPL_TTL_SLOTS);
XDPL_FIELD_MAP(xdpl_tos, XDPL_TOS_SLOTS);
XDPL_FIELD_MAP(xdpl_icmpt, XDPL_ICMP_SLOTS);
XDPL_FIELD_MAP(xdpl_icmpc, XDPL_ICMP_SLOTS);

/* Payload matches (classify_payload.h): each generation's windows, and the
 * rules by a window's masked bytes. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XDPL_GENS);
	__type(key, __u32);
	__type(value, struct xdpl_payload_cfg);
} xdpl_payload_shapes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, XDPL_PAYLOAD_VALUES);
	__type(key, struct xdpl_payload_key);
	__type(value, struct xdpl_bitmap);
} xdpl_payload SEC(".maps");

/* Bans: the tries map a banned prefix to its slot in xdpl_bans, where the
 * ban lives (bans.h). Sized together by the control plane (--max-bans); the
 * tries get room for races of two CPUs into one slot. */
XDPL_LPM_MAP(xdpl_ban4, struct xdpl_ban_key4, __u32, 2 * XDPL_MAX_BANS);
XDPL_LPM_MAP(xdpl_ban6, struct xdpl_ban_key6, __u32, 2 * XDPL_MAX_BANS);

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XDPL_MAX_BANS);
	__type(key, __u32);
	__type(value, struct xdpl_ban);
} xdpl_bans SEC(".maps");

/* sliding_log levels: a key's state entry holds the id of its log (a), and
 * the log lives here, keyed by that id. An LRU like the state tables, so its
 * size is fixed (the control plane sizes it from --max-sources); a log
 * evicted while its key's entry lives is recreated empty, as an evicted
 * entry of any other algorithm restarts from nothing. The id rather than
 * the key: a global level has no key, and an 8-byte key is a smaller
 * entry. An LRU cannot hold a bpf_spin_lock: slidelog.h locks with
 * compare-and-swap. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, XDPL_MAX_LOGS);
	__type(key, __u64);
	__type(value, struct xdpl_log);
} xdpl_logs SEC(".maps");

/* The last log id handed out, and the empty log new logs are copied from. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xdpl_log_ids);
} xdpl_log_ids SEC(".maps");

/* The refused-until cache (bpf/refused.h): per CPU, direct-mapped. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1 << XDPL_REFUSED_BITS);
	__type(key, __u32);
	__type(value, struct xdpl_refused);
} xdpl_refused SEC(".maps");

/* The flow cache (bpf/flows.h): per CPU, direct-mapped. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1 << XDPL_FLOW_BITS);
	__type(key, __u32);
	__type(value, struct xdpl_flow);
} xdpl_flows SEC(".maps");

/* The packet xdpl_main parses and the flow cache's tags, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xdpl_scratch);
} xdpl_scratch SEC(".maps");

/* SYN cookies: when a SYN to a destination address and port (hashed)
 * last reached the stack, so that one a second still does (syncookie.h).
 * Shared by all CPUs; a race costs one more SYN passed. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XDPL_COOKIE_PASS_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} xdpl_cookie_pass SEC(".maps");

/* Rejects (reject.h): the state of the global budget of answers, reset by
 * the control plane when the budget changes; the time of the last answer
 * by source, hashed (a shared array: a race is settled by compare-and-swap);
 * the quote of an ICMP error being built, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xdpl_state);
} xdpl_reject_budget SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XDPL_REJECT_SOURCE_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} xdpl_reject_sources SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xdpl_reply_buf);
} xdpl_reply_scratch SEC(".maps");

/* Moved by every ban added (struct xdpl_ban_epoch). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xdpl_ban_epoch);
} xdpl_ban_epoch SEC(".maps");

/* allow/deny entries of host addresses (value XDPL_ACL_*): a hash lookup
 * instead of a walk down a trie of every listed address; the longest
 * prefix there is, so a hit decides. */
#define XDPL_HOST_MAP(_name, _key)                                                                 \
	struct {                                                                                   \
		__uint(type, BPF_MAP_TYPE_HASH);                                                   \
		__uint(max_entries, XDPL_MAX_ACL);                                                 \
		__uint(map_flags, BPF_F_NO_PREALLOC);                                              \
		__type(key, _key);                                                                 \
		__type(value, __u32);                                                              \
	} _name SEC(".maps")

XDPL_HOST_MAP(xdpl_acl4_hosts, struct xdpl_host4);
XDPL_HOST_MAP(xdpl_acl6_hosts, struct xdpl_host6);

/* Frames the parser cannot judge (unparsed.h): counts by kind. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, XDPL_UP_KINDS);
	__type(key, __u32);
	__type(value, struct xdpl_unparsed_stats);
} xdpl_unparsed_counts SEC(".maps");

/* The unparsed action and limit, written by the control plane with the
 * generation it belongs to. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XDPL_GENS);
	__type(key, __u32);
	__type(value, struct xdpl_unparsed_cfg);
} xdpl_unparsed_cfgs SEC(".maps");

/* The unparsed limit's state: one global bucket, reset by the control plane
 * when the limit changes. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xdpl_state);
} xdpl_unparsed_state SEC(".maps");

#include "conversation_maps.h"
#include "fleet_maps.h"

#endif
