/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Constants shared with Go. They are C enums so that bpf2go (-type xdpl_const)
 * emits them as Go constants: this file is the single place they are defined.
 * maps/ re-exports them under Go names.
 */
#ifndef XDPLIMIT_CONSTS_H
#define XDPLIMIT_CONSTS_H

enum xdpl_const {
	/* Bumped whenever a map's key/value layout or meaning changes, so that a
	 * new control plane refuses to adopt pinned state it cannot read. */
	XDPL_LAYOUT_VERSION = 15,

	/* Policy generations: the control plane writes the inactive one and
	 * flips ctl.active, so a packet sees one whole policy, never a mix. */
	XDPL_GENS = 2,
	XDPL_MAX_RULES = 256,
	XDPL_BITMAP_WORDS = 4, /* XDPL_MAX_RULES / 64 */
	/* A rule's own limit plus up to three aggregate levels. */
	XDPL_MAX_LEVELS = 4,
	/* Counter slots are allocated by rule name and stay stable across
	 * reloads; twice the rules so a reload can replace every name. */
	XDPL_COUNTER_SLOTS = 512,
	/* Global levels' state: one entry per level of both generations. */
	XDPL_GLOBAL_SLOTS = 2 * XDPL_MAX_RULES * XDPL_MAX_LEVELS,
	XDPL_NAME_LEN = 64,

	/* Classification maps are arrays indexed by gen * SLOTS + value. */
	XDPL_PROTO_SLOTS = 512, /* family index (0 = IPv4, 1 = IPv6) * 256 + protocol */
	XDPL_PORT_SLOTS = 65538,
	XDPL_PORT_IDX_NONE = 65536, /* protocol without ports (ICMP, ...) */
	XDPL_PORT_IDX_FRAG = 65537, /* non-first fragment: ports unknown */
	XDPL_TCPF_SLOTS = 258,
	XDPL_TCPF_IDX_NONE = 256, /* not TCP */
	XDPL_TCPF_IDX_FRAG = 257, /* non-first TCP fragment: flags unknown */
	XDPL_VLAN_SLOTS = 4097,
	XDPL_VLAN_IDX_UNTAGGED = 4096,

	/* Dimensions a generation uses; unused ones are not looked up. */
	XDPL_DIM_PROTO = 1 << 0,
	XDPL_DIM_DPORT = 1 << 1,
	XDPL_DIM_SPORT = 1 << 2,
	XDPL_DIM_SRC = 1 << 3,
	XDPL_DIM_DST = 1 << 4,
	XDPL_DIM_TCPF = 1 << 5,
	XDPL_DIM_VLAN = 1 << 6,

	/* Generation flags. */
	XDPL_GF_SHADOW = 1 << 0, /* mode: shadow, deny list included */
	XDPL_GF_ACL = 1 << 1,	 /* allow/deny entries exist */
	XDPL_GF_BANS = 1 << 2,	 /* bans can exist: the ban table is looked up */
	/* Which allow/deny maps hold entries: host addresses (/32, /128) live in
	 * hash maps, shorter prefixes in the tries (XDPL_GF_ACL is both). */
	XDPL_GF_ACL_EXACT = 1 << 3,
	XDPL_GF_ACL_PREFIX = 1 << 4,
	/* Fleet fixed windows exist: the ban epoch, which a sync lowering one
	 * moves, is read for every packet (refused.h). */
	XDPL_GF_FLEET_WINDOWS = 1 << 5,
	/* No rule matches on the source address and some rule's first level
	 * is global: the flow cache is also looked up under a key without the
	 * source, after the lists and the bans (flows.h). */
	XDPL_GF_NO_SOURCE_FLOWS = 1 << 6,
	/* Some rule answers SYNs over its limit with a cookie: TCP ACKs are
	 * checked against the cookies (syncookie.h). */
	XDPL_GF_SYNCOOKIE = 1 << 7,
	/* Conversation checks (conversation.h), each of TCP without SYN and
	 * of UDP: on (armed by the control plane while an attack lasts, or
	 * always), always, and in shadow (counted, then the rules judge). */
	XDPL_GF_CONV_TCP = 1 << 8,
	XDPL_GF_CONV_UDP = 1 << 9,
	XDPL_GF_CONV_TCP_ALWAYS = 1 << 10,
	XDPL_GF_CONV_UDP_ALWAYS = 1 << 11,
	XDPL_GF_CONV_TCP_SHADOW = 1 << 12,
	XDPL_GF_CONV_UDP_SHADOW = 1 << 13,
	XDPL_GF_CONV_REFL = 1 << 14, /* the reflection guard, likewise */
	XDPL_GF_CONV_REFL_ALWAYS = 1 << 15,
	XDPL_GF_CONV_REFL_SHADOW = 1 << 16,
	XDPL_GF_CONV_ECHO = 1 << 17, /* the guard judges ICMP echo replies too */
	/* What the host forwards meets the TCP check, or the reflection
	 * guard, through conntrack (conntrack.h) instead of passing. */
	XDPL_GF_CONV_TCP_CT = 1 << 18,
	XDPL_GF_CONV_REFL_CT = 1 << 19,
	/* Every packet's sample, one in traffic_mask + 1 (traffic.h). */
	XDPL_GF_TRAFFIC = 1 << 20,

	XDPL_ALG_TOKEN_BUCKET = 1,
	XDPL_ALG_FIXED_WINDOW = 2,
	XDPL_ALG_SLIDING_WINDOW = 3,
	XDPL_ALG_SLIDING_LOG = 4,

	/* Level flags. */
	XDPL_LF_BYTES = 1 << 0,	     /* cost is the frame length, not 1 */
	XDPL_LF_FINE_CLOCK = 1 << 1, /* coarse clock too coarse for this level */
	/* Create the entry at a key's first packet: the level's limit is below
	 * what an untracked key may pass (see xdpl_track_after). */
	XDPL_LF_TRACK_FIRST = 1 << 2,
	/* The limit is the fleet's: admissions are reported for the sync with
	 * Redis (bpf/fleet.h). */
	XDPL_LF_FLEET = 1 << 3,

	XDPL_KEY_SRC = 0,	/* source address masked to a prefix */
	XDPL_KEY_SRC_DPORT = 1, /* ... and destination port */
	XDPL_KEY_GLOBAL = 2,	/* one bucket for the rule */

	XDPL_RF_SHADOW = 1 << 0,
	XDPL_RF_BAN = 1 << 1, /* over the limit: ban the source prefix (bans.h) */
	/* Over the limit: answer the SYN with a SYN-ACK carrying a SYN cookie
	 * (syncookie.h) instead of dropping it. */
	XDPL_RF_SYNCOOKIE = 1 << 2,
	/* Over the limit: answer with a reset or an ICMP error, when the
	 * budgets allow, and drop (reject.h). */
	XDPL_RF_REJECT = 1 << 3,

	XDPL_V_PASS = 0,
	XDPL_V_DROP = 1,
	XDPL_V_SHADOW = 2, /* would have dropped; passed */
	XDPL_V_COOKIE = 3, /* answered with a SYN cookie (XDP_TX); the SYN goes no further */
	XDPL_V_REJECT = 4, /* answered with a reset or an ICMP error (XDP_TX); no further */
	XDPL_NVERDICTS = 5,

	XDPL_ACL_ALLOW = 1,
	XDPL_ACL_DENY = 2,

	/* Indexes into the global per-CPU counter array. */
	XDPL_C_ALLOW = 0,
	XDPL_C_DENY = 1,
	XDPL_C_DENY_SHADOW = 2,
	XDPL_C_UNMATCHED = 3,
	XDPL_C_MALFORMED = 4,
	XDPL_C_NON_IP = 5,
	XDPL_C_NEW_SOURCE = 6,
	XDPL_C_INSERT_FAIL = 7,
	XDPL_C_CAS_EXHAUSTED = 8,
	XDPL_C_UNTRACKED =
	    9, /* admitted at a level without a state entry (sketch: not heavy yet) */
	XDPL_C_FLEET_LOST = 10,	    /* fleet keys not reported: the ring was full */
	XDPL_C_BAN_DROP = 11,	    /* dropped: the source is banned */
	XDPL_C_BAN_SHADOW = 12,	    /* banned in shadow: would have dropped; passed */
	XDPL_C_BAN_STARTED = 13,    /* bans a rule started (shadow ones included) */
	XDPL_C_BAN_REPLACED = 14,   /* live bans replaced: their set was full */
	XDPL_C_REFUSED_CACHED = 15, /* refused by the per-CPU refused-until cache */
	XDPL_C_FLOW_CACHED = 16,    /* refused by the per-CPU flow cache, unclassified */
	/* SYN cookies (syncookie.h): SYNs a cookie rule refused but passed to
	 * the stack, which answers them with its own cookie and so keeps its
	 * listeners accepting cookie ACKs; SYNs refused that could not be
	 * answered (SYN+FIN or RST, a fragment, more VLAN tags or IPv6
	 * extension headers than the answer follows, no room), dropped; and
	 * ACKs to a listener checked against the cookies. */
	XDPL_C_COOKIE_KEEPALIVE = 17,
	XDPL_C_COOKIE_UNANSWERED = 18,
	XDPL_C_COOKIE_ACK_VALID = 19,
	XDPL_C_COOKIE_ACK_INVALID = 20,
	/* Packets a reject rule refused and dropped unanswered (reject.h):
	 * the global budget was spent; their source had an answer within the
	 * second; no answer may be sent (an address that is not one host's,
	 * a link-layer broadcast, an ICMP error, a reset, a non-first
	 * fragment); or none could be built (a shape the answer does not
	 * follow, too short to quote). */
	XDPL_C_REJECT_BUDGET = 21,
	XDPL_C_REJECT_SOURCE = 22,
	XDPL_C_REJECT_NEVER = 23,
	XDPL_C_REJECT_UNANSWERED = 24,
	/* Conversation checks (conversation.h): TCP segments without SYN that
	 * belong to no socket, UDP datagrams to a port without one, dropped
	 * or (in shadow) passed; and packets looked up against the sockets,
	 * armed or watching. */
	XDPL_C_NO_CONNECTION = 25,
	XDPL_C_NO_CONNECTION_SHADOW = 26,
	XDPL_C_NO_SOCKET = 27,
	XDPL_C_NO_SOCKET_SHADOW = 28,
	XDPL_C_CONV_LOOKUPS = 29,
	/* The reflection guard: datagrams from a reflector's service port that
	 * answer no request this host sent, dropped or (in shadow) passed;
	 * requests the egress program recorded. */
	XDPL_C_NO_REQUEST = 30,
	XDPL_C_NO_REQUEST_SHADOW = 31,
	XDPL_C_REQUESTS = 32,
	XDPL_NCOUNTERS = 33,

	XDPL_CLOCK_KTIME = 0,  /* bpf_ktime_get_ns for every level */
	XDPL_CLOCK_COARSE = 1, /* coarse clock, fine only for XDPL_LF_FINE_CLOCK levels */
	XDPL_CLOCK_MAP = 2,    /* xdpl_clock[0]: injected time for tests and replay */

	/* Time inside the algorithms is in 1/16 ns, so that the per-packet
	 * rounding of a token bucket's emission interval stays below 1/16 ns. */
	XDPL_TIME_SHIFT = 4,
	/* Emission intervals are fixed point: ns << XDPL_FP_SHIFT per unit. */
	XDPL_FP_SHIFT = 16,
	/* Window counters pack (sequence << 40 | count) into one u64 so that
	 * one compare-and-swap updates both. */
	XDPL_WIN_COUNT_BITS = 40,
	XDPL_WIN_SEQ_BITS = 24,
	/* A sliding window is under 2^XDPL_SW_TIME_BITS units of 2^p3 ns (its
	 * time shift): a count times a time fits 64 bits (limiters.h). */
	XDPL_SW_TIME_BITS = 24,
	/* Compare-and-swap attempts before a packet is dropped as contended. */
	XDPL_CAS_TRIES = 4,
	/* IPv6 extension headers followed before a packet is judged as a
	 * fragment of unknown protocol and ports (parsing.h). */
	XDPL_MAX_IPV6_EXT = 32,
	/* VLAN tags popped inline; any more are walked by a function call, up
	 * to 1024 in all: every tag a 4 KiB frame holds, and no XDP frame on 4
	 * KiB pages is longer (the page less headroom and skb_shared_info). */
	XDPL_MAX_VLAN_TAGS = 8,
	XDPL_MAX_VLAN_WALK = 1016,

	/* Why the parser could not judge a frame (xdpl_unparsed_stats index).
	 * All but TOO_MANY_HEADERS are frames the Linux stack drops; a chain
	 * of extension headers longer than XDPL_MAX_IPV6_EXT is judged by the
	 * rules (as a fragment) and only counted here. */
	XDPL_UP_TRUNCATED = 0,		/* a header runs past the frame or the IP length */
	XDPL_UP_BAD_LENGTH = 1,		/* an IP or UDP length field the stack refuses */
	XDPL_UP_BAD_HEADER = 2,		/* IP version or IHL, TCP data offset */
	XDPL_UP_BAD_CHECKSUM = 3,	/* IPv4 header checksum */
	XDPL_UP_TOO_MANY_VLAN_TAGS = 4, /* more than 1024 tags: no frame up to 4 KiB */
	XDPL_UP_TOO_MANY_HEADERS = 5,	/* more than XDPL_MAX_IPV6_EXT (judged) */
	XDPL_UP_KINDS = 6,

	/* Admission sketch: a per-CPU count-min sketch of keys missing from
	 * the state table; counters are tagged with a short epoch. */
	XDPL_SKETCH_ROWS = 4,
	XDPL_SKETCH_MARK_ROWS = 2, /* rows whose cells carry marks */
	/* Cells per row per CPU, at most: the control plane picks the width
	 * (a power of two) from the CPU count, within a memory budget. */
	XDPL_SKETCH_MAX_WIDTH = 1 << 19,
	XDPL_SKETCH_EPOCH_SHIFT = 24, /* ns >> 24: epochs of 16.8 ms */
	XDPL_SKETCH_LINE_CELLS = 16,  /* 4-byte cells per 64-byte line */
	XDPL_SKETCH_ROW_CELLS = 4,    /* and per row within a line */
	/* A cell is marked when a key hashed to it used its state entry in
	 * this mark epoch or the one before; a key whose cells are not all
	 * marked is not looked up in the state table. ns >> 28: 268 ms. */
	XDPL_SKETCH_MARK_SHIFT = 28,

	/* Fleet levels (fleet.h). A token bucket's word b: in the exchange (HOT
	 * bit), epoch bits and units since the last take; else a share's tat. */
	XDPL_FLEET_EPOCH_SHIFT = 48,
	XDPL_FLEET_EPOCH_BITS = 15,
	XDPL_FLEET_HOT_BIT = 63,
	XDPL_FLEET_SHARE_SLOTS = 1024, /* xdpl_fleet_shares: by state id & (this - 1) */
	XDPL_FLEET_BATCH = 4096,       /* entries xdpl_fleet_apply takes per run */
	XDPL_FLEET_TAKE = 1,	       /* token_bucket: take the pending units */
	XDPL_FLEET_FOLD_TAT = 2,       /* token_bucket: tat = max(tat, fleet's) */
	XDPL_FLEET_READ = 3,	       /* fixed_window: read the window word */
	XDPL_FLEET_ADD = 4,	       /* fixed_window: add other hosts' units */
	XDPL_FLEET_HEAT = 5,	       /* token_bucket: the key takes part in the exchange */
	XDPL_FLEET_COOL = 6,	       /* token_bucket: take, and back within its share */
	XDPL_FOP_GLOBAL = 1 << 0,      /* the entry is xdpl_globals[slot] */
	XDPL_FOP_DONE = 1 << 1,	       /* out: done */
	XDPL_FOP_MISSING = 1 << 2,     /* out: no state entry (evicted) */
	XDPL_FOP_STALE = 1 << 3,       /* out: the window has moved on */

	/* The stage benchmark (bench.h, xdpl_bench_stop): XDP_DROP after this
	 * stage; 0 runs them all, XDPL_STOP_PARSE is xdpl_bench_parse_only. */
	XDPL_STOP_PARSE = 1,	    /* parsed */
	XDPL_STOP_FLOWS = 2,	    /* the generation read, the first flow cache lookups */
	XDPL_STOP_LISTS = 3,	    /* allow/deny lists, bans */
	XDPL_STOP_COOKIE_ACKS = 4,  /* the check of ACKs against SYN cookies */
	XDPL_STOP_GLOBAL_FLOWS = 5, /* the flow cache keyed without the source, after the lists */
	XDPL_STOP_RULE = 6,	    /* the rule's classification and levels */

	/* The floor programs of the same build (floor.h, xdpl_bench_floor;
	 * 0 = off): after the parser, only what any limiter must do. */
	XDPL_FLOOR_REFUSED = 1,	    /* a known source refused */
	XDPL_FLOOR_GLOBAL = 2,	    /* a global level refusing, whatever the source */
	XDPL_FLOOR_ADMITTED = 3,    /* a known source admitted */
	XDPL_FLOOR_INSERTED = 4,    /* a new source into a full state table */
	XDPL_FLOOR_UNTRACKED = 5,   /* a new source counted in the sketch */
	XDPL_FLOOR_ADMITTED_FW = 6, /* a known source admitted by a fixed window */
	XDPL_FLOOR_ADMITTED_SW = 7, /* a known source admitted by a sliding window */

	/* Sampled drops for top and the drop log: each CPU's ring holds a
	 * power of two between these, as many as XDPL_DROP_RING_BUDGET samples
	 * (64 bytes each) spread over the possible CPUs allow. */
	XDPL_DROP_RING_MIN = 1024,
	XDPL_DROP_RING_MAX = 16384,
	XDPL_DROP_RING_BUDGET = 32768,
	XDPL_SAMPLE_DENY = 0xffff, /* slot of samples from the deny list */
	/* Samples of every verdict (traffic.h): the frame's first
	 * XDPL_TRAFFIC_CAP bytes, XDPL_TRAFFIC_RING samples for each possible
	 * CPU. */
	XDPL_TRAFFIC_CAP = 224,
	XDPL_TRAFFIC_RING = 1024,

	/* What decided a packet (replay --explain). */
	XDPL_WHY_NON_IP = 1,
	XDPL_WHY_MALFORMED = 2,
	XDPL_WHY_ALLOW = 3,
	XDPL_WHY_DENY = 4,
	XDPL_WHY_UNMATCHED = 5,
	XDPL_WHY_RULE = 6,

	/* Signature match fields (classify.h). Each is one more array
	 * dimension, indexed by gen * SLOTS + value. */
	XDPL_LEN_SLOTS = 65536,	  /* IP packet length */
	XDPL_TTL_SLOTS = 256,	  /* TTL or hop limit */
	XDPL_TOS_SLOTS = 256,	  /* TOS byte or traffic class (DSCP << 2 | ECN) */
	XDPL_ICMP_SLOTS = 258,	  /* ICMP type, or code, or: */
	XDPL_ICMP_IDX_NONE = 256, /* not ICMP or ICMPv6 */
	XDPL_ICMP_IDX_FRAG = 257, /* type and code unknown (fragment, cut short) */
	XDPL_DIM_LEN = 1 << 7,
	XDPL_DIM_TTL = 1 << 8,
	XDPL_DIM_TOS = 1 << 9,
	XDPL_DIM_ICMPT = 1 << 10,
	XDPL_DIM_ICMPC = 1 << 11,
	/* Payload matches (classify_payload.h): a rule's bytes lie in one
	 * window of XDPL_PAYLOAD_WINDOW bytes; a generation's rules use at
	 * most XDPL_PAYLOAD_SHAPES distinct windows (start and mask). */
	XDPL_DIM_PAYLOAD = 1 << 12,
	XDPL_PAYLOAD_WINDOW = 16,
	XDPL_PAYLOAD_SHAPES = 8,
	XDPL_PAYLOAD_VALUES = XDPL_GENS * XDPL_MAX_RULES, /* a rule's one value per generation */
	/* xdpl_pkt.icmp */
	XDPL_ICMP_NONE = 0,    /* not ICMP/ICMPv6, or a non-first fragment */
	XDPL_ICMP_OK = 1,      /* icmp_type and icmp_code are the header's */
	XDPL_ICMP_UNKNOWN = 2, /* ICMP without its first two bytes */

	XDPL_KEY_SRC_SPORT = 3, /* source address masked to a prefix, and source port */
	/* Level of a drop sample not refused by a rule's level (deny list). */
	XDPL_SAMPLE_NO_LEVEL = 0xff,
	XDPL_BAN_WAYS = 8,	  /* bans.h's ways per set */
	XDPL_WAYS4 = 4,		  /* table4.h's ways per set */
	XDPL_BAN_MANUAL = 0xffff, /* origin of a ban made by hand */
	XDPL_BAN_REASON_LEN = 64,
	XDPL_BF_SHADOW = 1 << 0, /* recorded and counted, never enforced */
	XDPL_WHY_BAN = 7,
	XDPL_SAMPLE_BAN = 0xfffe, /* slot of samples of banned sources */
	/* sliding_log: the most admission times a log holds, so the largest
	 * limit (packets per window) it can enforce (bpf/slidelog.h). */
	XDPL_LOG_MAX = 64,
	/* The per-CPU refused-until cache (bpf/refused.h): 2^bits slots. */
	XDPL_REFUSED_BITS = 10,
	/* The per-CPU flow cache (bpf/flows.h): 2^bits slots. */
	XDPL_FLOW_BITS = 10,

	/* SYN cookies (bpf/syncookie.h). */
	XDPL_WHY_COOKIE_ACK = 8,       /* an ACK to a listener with a wrong cookie */
	XDPL_SAMPLE_COOKIE_ACK = 0xfe, /* level of its drop sample */
	XDPL_COOKIE_ACK_VALID = 0,     /* xdpl_rule_stats.cookie_acks index */
	XDPL_COOKIE_ACK_INVALID = 1,
	XDPL_COOKIE_ACK_KINDS = 2,
	/* Slots of the keepalive clock, by destination address and port. */
	XDPL_COOKIE_PASS_SLOTS = 1024,
	/* SYNs a cookie rule refuses still reach the stack once per second
	 * per slot: a listener accepts a cookie ACK only within two minutes of
	 * a cookie it sent itself (tcp_synq_no_recent_overflow). */
	XDPL_COOKIE_PASS_NS = 1000000000,
	/* VLAN tags an answer (a SYN-ACK, a reset, an ICMP error) is built
	 * behind (reply.h). */
	XDPL_REPLY_MAX_TAGS = 4,
	/* xdpl_synack_cfg.flags: what the stack's own SYN-ACK would offer. */
	XDPL_SYNACK_TS = 1 << 0, /* timestamps, without random offsets */
	XDPL_SYNACK_SACK = 1 << 1,
	XDPL_SYNACK_WSCALE = 1 << 2,
	XDPL_SYNACK_ECN = 1 << 3,

	/* Rejects (bpf/reject.h). Slots of the time of the last answer, by
	 * source (hashed), and the interval between two answers to one. */
	XDPL_REJECT_SOURCE_SLOTS = 1 << 16,
	XDPL_REJECT_SOURCE_NS = 1000000000,
	/* The most an ICMP error quotes: what fits in 576 bytes with its IPv4
	 * and ICMP headers (RFC 1812 4.3.2.3), in 1280 with its IPv6 and
	 * ICMPv6 headers (RFC 4443 2.4 (c)). */
	XDPL_REJECT_QUOTE4 = 548,
	XDPL_REJECT_QUOTE6 = 1232,

	/* Conversation checks (bpf/conversation.h). */
	XDPL_CONV_TCP = 0,
	XDPL_CONV_UDP = 1,
	XDPL_CONV_REFLECTION = 2,
	XDPL_CONV_CHECKS = 3,
	XDPL_WHY_NO_CONNECTION = 9,    /* TCP without SYN that no socket owns */
	XDPL_WHY_NO_SOCKET = 10,       /* UDP to a port no socket is bound to */
	XDPL_WHY_NO_REQUEST = 11,      /* a reflector's answer to no request */
	XDPL_SAMPLE_NO_REQUEST = 0xfb, /* level of a no_request sample */
	/* Requests to reflector ports the egress program recorded: the
	 * remote's address and port, the local ones, and for DNS the query
	 * ID; at most this many, the least recently sent evicted. */
	XDPL_REQUESTS_MAX = 1 << 16,
	/* Each generation's reflector ports: a bitmap of 65536 bits, 1024
	 * words, in xdpl_reflectors[gen * 1024 + port / 64]. */
	XDPL_REFLECTOR_WORDS = 1024,
	XDPL_SAMPLE_CONV = 0xfffd,	  /* slot of their drop samples */
	XDPL_SAMPLE_NO_CONNECTION = 0xfd, /* level of a no_connection sample */
	XDPL_SAMPLE_NO_SOCKET = 0xfc,	  /* level of a no_socket sample */
	/* Destinations (address, protocol, port) hashed into this many slots
	 * of each check's watch, where the control plane reads the rate of
	 * what the check drops, or would drop while it is not armed. */
	XDPL_CONV_SLOTS = 256,
	/* A check that is not armed looks one in this many packets up, so
	 * that the watch sees an attack begin at a sixty-fourth of the cost. */
	XDPL_CONV_WATCH_EVERY = 64,
	/* This host's local addresses and prefixes (the local routing table). */
	XDPL_LOCAL_MAX = 4096,
};

/* Build-time overridable sizes (-DXDPL_MAX_...); the control plane can also
 * resize the maps before load. */
#ifndef XDPL_MAX_SOURCES
#define XDPL_MAX_SOURCES (1 << 20)
#endif
#ifndef XDPL_MAX_OTHER_SOURCES
#define XDPL_MAX_OTHER_SOURCES (1 << 18) /* IPv6, global and src+port keys */
#endif
#ifndef XDPL_MAX_LOGS
#define XDPL_MAX_LOGS (1 << 16) /* sliding_log keys (XDPL_MAX_SOURCES / 16) */
#endif
#ifndef XDPL_MAX_ACL
#define XDPL_MAX_ACL (1 << 18) /* per family, both generations */
#endif
#ifndef XDPL_MAX_BANS
#define XDPL_MAX_BANS (1 << 16) /* a multiple of XDPL_BAN_WAYS; resized before load */
#endif
#ifndef XDPL_MAX_CIDRS
#define XDPL_MAX_CIDRS (1 << 14) /* per family and direction, both generations */
#endif

#define XDPL_WIN_COUNT_MASK ((1ULL << XDPL_WIN_COUNT_BITS) - 1)
#define XDPL_WIN_SEQ_MASK   ((1ULL << XDPL_WIN_SEQ_BITS) - 1)

#endif
