/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Map keys and values. Go gets the same layouts from bpf2go (-type), never
 * from hand-copied structs. Explicit padding keeps them hole-free. */
#ifndef XDPLIMIT_STRUCTS_H
#define XDPLIMIT_STRUCTS_H

#include <linux/types.h>
#include "xdplimit_consts.h"

/* One bit per rule, bit i = rule i in file order. */
struct xdpl_bitmap {
	__u64 w[XDPL_BITMAP_WORDS];
};

/* One limiter level of a rule. */
struct xdpl_level {
	__u8 algorithm; /* XDPL_ALG_* */
	__u8 flags;	/* XDPL_LF_* */
	__u8 key_kind;	/* XDPL_KEY_* */
	__u8 origin;	/* the level's index in the policy (0 = the rule's own) */
	/* State entries are keyed by state_id: it changes when the level's
	 * parameters change, so a changed limit starts fresh while unchanged
	 * rules keep their buckets across a reload. */
	__u32 state_id;
	__be32 mask4;	 /* IPv4 source mask (network order) */
	__be32 mask6[4]; /* IPv6 source mask */
	/* key_kind XDPL_KEY_GLOBAL: the level's entry in xdpl_globals. A kept
	 * level keeps its slot across a reload, as its state_id. */
	__u32 slot;
	/* token_bucket: p1 = emission interval per unit, ns << XDPL_FP_SHIFT;
	 *               p2 = tolerance (burst * interval) in time units.
	 * windows:      p1 = window in ns; p2 = limit per window in units. */
	__u64 p1;
	__u64 p2;
	/* fixed_window: added to now before the window index is taken, so that
	 * a fleet's hosts open their windows together (0 at host scope).
	 * sliding_window: the time shift, the log2 of the unit its previous
	 * window's share is reckoned in (limiters.h). */
	__u64 p3;
};

struct xdpl_rule {
	__u32 counter_slot; /* index into xdpl_stats and xdpl_names */
	__u8 flags;	    /* XDPL_RF_* */
	__u8 nlevels;
	/* XDPL_RF_BAN: the source prefix banned, per family. */
	__u8 ban_bits4;
	__u8 ban_bits6;
	/* Evaluated in order; the control plane puts cheap shared aggregates
	 * first. A packet passes only if every level admits it. */
	struct xdpl_level levels[XDPL_MAX_LEVELS];
	__u64 ban_ns; /* XDPL_RF_BAN: how long a ban lasts */
};

/* A packet as the parser saw it (parsing.h). */
struct xdpl_pkt {
	__u32 len;   /* frame length in bytes: the cost of byte-counting limits */
	__u8 family; /* 4 or 6 */
	__u8 proto;  /* L4 protocol after IPv6 extension headers */
	__u8 ports;  /* enum xdpl_ports */
	__u8 tcp_flags;
	__u16 sport; /* host order */
	__u16 dport;
	__u16 vlan;	 /* VID of the outer tag, or XDPL_VLAN_IDX_UNTAGGED */
	__u8 unparsed;	 /* XDPL_UP_* + 1 when the parser gave up, else 0 */
	__u8 long_chain; /* more IPv6 extension headers than XDPL_MAX_IPV6_EXT */
	__u16 iplen;	 /* IP packet length: IPv4 total length, IPv6 40 + payload length */
	__u8 ttl;	 /* IPv4 TTL or IPv6 hop limit */
	__u8 tos;	 /* IPv4 TOS or IPv6 traffic class */
	__be32 saddr[4];
	__be32 daddr[4];
	__u8 icmp; /* XDPL_ICMP_*: whether icmp_type and icmp_code were read */
	__u8 icmp_type;
	__u8 icmp_code;
	__u8 pad_icmp;
	/* Word 7, outside the flow cache's signature (flows.h): where the
	 * transport payload starts in the frame, and its bytes within the IP
	 * packet (payload matches, classify_payload.h). A fragment's are 0. */
	__u16 payload;
	__u16 payload_len;
	__u32 pad_payload;
};

/* What a SYN-ACK carrying a cookie offers (syncookie.h): what this host's
 * stack would put in its own, read by the control plane from the
 * interface's MTU and the namespace's sysctls. */
struct xdpl_synack_cfg {
	__u16 mss4;    /* the largest segment the interface takes: MTU - 40 */
	__u16 mss6;    /* MTU - 60 */
	__u8 ttl;      /* IPv4 TTL */
	__u8 hoplimit; /* IPv6 hop limit */
	__u8 wscale;   /* the window scale the stack will use for the connection */
	__u8 flags;    /* XDPL_SYNACK_* */
};

struct xdpl_gen_cfg {
	__u32 dims;   /* XDPL_DIM_* looked up for this generation */
	__u32 nrules; /* rules 0..nrules-1 exist */
	__u32 flags;  /* XDPL_GF_* */
	/* Sample one in (sample_mask + 1) drops into xdpl_drops (top and the
	 * drop log); a runtime value so that a reload can change it. */
	__u32 sample_mask;
	/* With XDPL_GF_TRAFFIC, sample one in (traffic_mask + 1) packets of
	 * every verdict (traffic.h). */
	__u32 traffic_mask;
	__u32 pad_traffic;
	/* Changes with every write of the generation (never 0 once written):
	 * what the per-CPU flow cache learned under another one is void. */
	__u32 seq;
	__u32 index; /* this generation's own index, 0 or 1 */
	struct xdpl_synack_cfg synack;
	/* The budget of the answers of reject rules: a token bucket shared by
	 * every CPU, its state in xdpl_reject_budget (reject.h). */
	struct xdpl_level reject;
	/* The packet fields this generation's rules and the flow cache's
	 * levels' keys read, all ones; the rest zero. A packet equal to another
	 * under this mask gets the same rule and the same keys there (flows.h). */
	struct xdpl_pkt sig_mask;
	/* The reflection guard: how long a recorded request is answerable. */
	__u64 refl_window_ns;
	/* The rules with action syncookie (syncookie.h, xdpl_cookie_port). */
	struct xdpl_bitmap cookie_rules;
};

struct xdpl_control {
	__u32 active; /* generation in force: 0 or 1 */
	__u32 pad;
	struct xdpl_gen_cfg gen[XDPL_GENS];
};

/* LPM keys carry the generation as their first data byte, so prefixlen is
 * 8 + the address prefix and each generation has its own entries. */
struct xdpl_lpm4 {
	__u32 prefixlen;
	__u8 gen;
	__u8 addr[4];
};

struct xdpl_lpm6 {
	__u32 prefixlen;
	__u8 gen;
	__u8 addr[16];
};

/* Per-source (or per-prefix, per-port, global) limiter state key. */
struct xdpl_key {
	__u32 state_id;
	__u16 port;  /* destination port for XDPL_KEY_SRC_DPORT, source port for
		      * XDPL_KEY_SRC_SPORT, else 0 */
	__u8 family; /* 4, 6, or 0 for XDPL_KEY_GLOBAL */
	__u8 pad;
	__be32 addr[4]; /* masked source address; IPv4 in addr[0] */
};

/* token_bucket: a = theoretical arrival time (GCRA), b unused (fleet
 * levels: the exchange's word or the local share's tat, fleet.h).
 * fixed_window: a = seq << 40 | count, b = full window index of the last reset.
 * sliding_window: a, b = packed counters of even and odd windows.
 * sliding_log: a = id of the key's log in xdpl_logs (0: none yet), b unused. */
struct xdpl_state {
	__u64 a;
	__u64 b;
};

/* Written by the control plane at every fleet sync. */
struct xdpl_fleet_sync {
	__u32 epoch;
	__u32 pad;
};

/* A fleet token-bucket level's local share (fleet.h): a key reports to
 * the exchange only once a bucket of the share's rate, charged inc per unit
 * (ns << XDPL_FP_SHIFT), runs more than tol ns ahead of now; it then
 * carries cross units into its first exchange, what its share's bucket
 * admitted beyond the share's rate. */
struct xdpl_fleet_share {
	__u32 state_id; /* whose share: 0 for none */
	__u32 pad;
	__u64 inc;
	__u64 tol;
	__u64 cross;
};

/* One entry of xdpl_fleet_apply's batch (XDPL_FLEET_* ops). */
struct xdpl_fleet_op {
	struct xdpl_key key;
	__u32 slot;  /* with XDPL_FOP_GLOBAL */
	__u16 op;    /* XDPL_FLEET_* */
	__u16 flags; /* XDPL_FOP_* */
	__u64 arg0;
	__u64 arg1;
	__u64 out0;
	__u64 out1;
};

/* The "packet" the control plane runs xdpl_fleet_apply on. */
struct xdpl_fleet_run {
	__u32 n;
	__u32 pad[15];
};

struct xdpl_counter {
	__u64 packets;
	__u64 bytes;
};

struct xdpl_rule_stats {
	struct xdpl_counter v[XDPL_NVERDICTS];
	__u64 level_drops[XDPL_MAX_LEVELS]; /* by origin: the level in policy order */
	/* A cookie rule's ACKs to a listener: cookie valid (passed) or not
	 * (dropped), by XDPL_COOKIE_ACK_*. */
	__u64 cookie_acks[XDPL_COOKIE_ACK_KINDS];
	/* A reject rule's refused packets dropped unanswered (the answered
	 * ones are v[XDPL_V_REJECT]). */
	__u64 reject_suppressed;
};

/* The last packet's decision, recorded only when xdpl_record is set (pcap
 * replay and the parser's differential tests under BPF_PROG_TEST_RUN). */
struct xdpl_decision {
	__u32 why;	     /* XDPL_WHY_* */
	__u32 verdict;	     /* XDPL_V_* */
	__s32 rule;	     /* rule index in the policy, or -1 */
	__s32 level;	     /* refusing level (policy order), or -1 */
	struct xdpl_key key; /* the refusing level's key, or the first level's */
	struct xdpl_pkt pkt; /* what the parser found */
};

/* Frames the parser could not judge, by kind (XDPL_UP_*), per CPU. */
struct xdpl_unparsed_stats {
	__u64 packets;
	__u64 bytes;
	__u64 dropped; /* by the policy's unparsed action or limit */
	__u64 dropped_bytes;
};

/* The policy for frames the parser cannot judge, per generation. */
struct xdpl_unparsed_cfg {
	__u32 action;  /* XDPL_V_PASS or XDPL_V_DROP */
	__u32 limited; /* 1: level applies to what action passes */
	/* A global level; its state is xdpl_unparsed_state[0]. */
	struct xdpl_level level;
};

/* A sampled dropped packet, for `xdplimit top` and the drop log: one cache
 * line (64 bytes), so that writing one touches a single line. seq publishes
 * it (account.h, xdpl_sample): the ring's index of the sample plus one once
 * every other field is written, 0 while they are. Readers load it before
 * and after the fields and keep the sample only if both are the index they
 * want. */
struct xdpl_drop_sample {
	__be32 saddr[4];
	__be32 daddr[4];
	__u32 len;    /* frame length */
	__u8 family;  /* 4 or 6 */
	__u8 verdict; /* XDPL_V_DROP or XDPL_V_SHADOW */
	__u16 slot;   /* rule counter slot, or XDPL_SAMPLE_DENY */
	__u16 sport;  /* host order; 0 when the packet has no ports */
	__u16 dport;
	__u16 iplen; /* IP packet length */
	__u8 proto;  /* L4 protocol */
	__u8 ttl;    /* IPv4 TTL or IPv6 hop limit */
	__u8 level;  /* refusing level's origin (policy order), or XDPL_SAMPLE_NO_LEVEL */
	__u8 ports;  /* enum xdpl_ports: whether sport and dport are known */
	__u8 tcp_flags;
	__u8 tos;
	__u32 pad;
	__u64 seq;
};
_Static_assert(sizeof(struct xdpl_drop_sample) == 64, "a sample is one cache line");
_Static_assert(__builtin_offsetof(struct xdpl_drop_sample, seq) % 8 == 0,
	       "seq is exchanged atomically and read as an aligned 64-bit word");

/* A sample of any packet, whatever its verdict (traffic.h): its frame's
 * first caplen bytes, for captures and fingerprints. */
struct xdpl_traffic_sample {
	__u64 seq;    /* the ring's index + 1, published last (a seqlock) */
	__u64 ns;     /* the datapath's coarse clock */
	__u32 len;    /* frame length */
	__u16 caplen; /* bytes of frame: min(len, XDPL_TRAFFIC_CAP) */
	__u8 verdict; /* XDPL_V_* */
	__u8 why;     /* XDPL_WHY_*: the stage that decided */
	__u16 slot;   /* the rule's counter slot, when why is XDPL_WHY_RULE */
	__u8 pad[6];
	__u8 frame[XDPL_TRAFFIC_CAP];
};
_Static_assert(sizeof(struct xdpl_traffic_sample) == 256, "a sample is four cache lines");

/* Per-CPU head of the ring of sampled drops: each CPU writes its own region
 * of xdpl_drop_samples, and readers take what was written since their last
 * read (at most a region's size). */
struct xdpl_drop_ring {
	__u64 written;
	__u32 rng; /* xorshift state: which drops are sampled (seeded from Go) */
	__u32 pad;
};

/* The ban tries' keys (prefixlen is the prefix's own: no generation). */
struct xdpl_ban_key4 {
	__u32 prefixlen;
	__u8 addr[4];
};

struct xdpl_ban_key6 {
	__u32 prefixlen;
	__u8 addr[16];
};

/* One slot of the ban table. expires_ns is on the datapath's clock (the
 * monotonic clock, or the injected one); 0 means the slot was never used, a
 * past time that it is free. */
struct xdpl_ban {
	__u64 expires_ns;
	__u64 started_ns;
	__u64 dropped; /* packets dropped (or counted in shadow) while banned */
	__u16 origin;  /* counter slot of the rule that banned, or XDPL_BAN_MANUAL */
	__u8 flags;    /* XDPL_BF_* */
	__u8 family;   /* 4 or 6 */
	__u32 prefixlen;
	__u8 addr[16]; /* IPv4 in the first 4 bytes */
	char reason[XDPL_BAN_REASON_LEN];
};

struct xdpl_name {
	char name[XDPL_NAME_LEN];
};

/* Control-plane bookkeeping pinned with the maps; the datapath never reads it. */
struct xdpl_metadata {
	__u32 layout_version;
	__u32 next_state_id;
	__u32 attach_mode; /* loader.Mode: 1 = native (driver), 2 = generic (skb) */
	__u32 clock_mode;
	__u64 attached_unix_ns;
	__u64 tick_ns;	 /* coarse clock resolution when attached */
	__u64 netns_ino; /* network namespace of the interface (pin dirs are per name) */
	__u32 ifindex;
	__u32 pid; /* the attach process in charge, for `xdplimit reload` */
	__u8 policy_sha256[32];
	char policy_path[256];
	__u64 manual_bans; /* bans made by hand, ever (metrics) */
	/* The policy's bans: section in force (what bans from the fleet and
	 * feeds may reach), for `xdplimit ban`, which runs without the policy.
	 * Never read by the datapath; ban_limits_set 0: none applied yet. */
	__u8 ban_limits_set;
	__u8 ban_min_prefix4;
	__u8 ban_min_prefix6;
	__u8 pad_ban_limits;
	__u32 ban_max_per_sync;
	__u32 ban_max_imported;
	__u32 pad_ban_limits2;
	/* The IPv4 state table's hash seed (xdpl_table4_seed): random when the
	 * table is made, kept with it, so that a program loaded onto pinned
	 * maps finds the keys where the one before put them. */
	__u64 table4_seed;
};

/* sliding_log: the times of a key's last admissions (bpf/slidelog.h).
 * seq = admissions so far << 1 | 1 while a CPU is writing; admission k's
 * time is in t[k % limit]. In its own table, so that the common state
 * entry stays 16 bytes for every other algorithm. */
struct xdpl_log {
	__u64 seq;
	__u64 t[XDPL_LOG_MAX];
};

/* next: the last log id handed out; ids are never reused, so a recycled
 * state entry never finds another key's log. empty: never written, the
 * value a new log is inserted with (a log does not fit the BPF stack). */
struct xdpl_log_ids {
	__u64 next;
	__u64 pad;
	struct xdpl_log empty;
};

/* A slot of the per-CPU refused-until cache (bpf/refused.h): key is refused
 * at every time in [from, until) of from's sketch mark epoch. */
struct xdpl_refused {
	struct xdpl_key key;
	__u64 from;
	__u64 until;
	__u64 stamp; /* fleet fixed windows: the ban epoch when noted (refused.h) */
};

/* Bans change without a new generation: each one added moves this, so that
 * the per-CPU flow cache (flows.h), which answers before the ban table,
 * forgets what it learned before the ban. A fleet sync that lowers a fixed
 * window's count moves it too (fleet_apply.bpf.c): the caches' refusals of
 * fleet windows hold only while it stays put (refused.h). */
struct xdpl_ban_epoch {
	__u64 datapath; /* bans the datapath started, fleet windows lowered (atomic add) */
	__u64 control;	/* a fresh random value after each ban the control plane adds */
};

/* The answers' per-CPU scratch (xdpl_reply_scratch): the quote of an ICMP
 * error, read out of the packet before the headers go where its start was
 * (reject.h), or the SYN's TCP header and options a SYN-ACK is built from
 * (struct xdpl_tcpopts, syncookie.h). One packet gets one answer. */
struct xdpl_reply_buf {
	__u8 b[XDPL_REJECT_QUOTE6];
};

/* Keys of the allow/deny hash maps of host addresses (/32 and /128). */
struct xdpl_host4 {
	__u32 gen;
	__be32 addr;
};

struct xdpl_host6 {
	__u32 gen;
	__be32 addr[4];
};

#endif
