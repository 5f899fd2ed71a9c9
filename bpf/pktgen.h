/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Types shared between the live-frames generator (pktgen.bpf.c) and its Go
 * side (package pktgen). bpf2go emits Go types for pktgen_cfg and, through
 * its fields, for the enums below. */
#ifndef XDPLIMIT_PKTGEN_H
#define XDPLIMIT_PKTGEN_H

#include <linux/types.h>

/* How xdpl_pktgen picks the source address of each frame it emits. */
enum pktgen_mode {
	/* The template's source, untouched. */
	PKTGEN_MODE_FIXED = 0,
	/* base, base+1, ..., base+count-1, then around again. */
	PKTGEN_MODE_SEQ = 1,
	/* (base & ~mask) | (hash(cpu, seq) & mask). */
	PKTGEN_MODE_RANDOM = 2,
};

/* Which checksums cover the rewritten source and must be updated. */
enum pktgen_flags {
	/* IPv4 header checksum at ip_csum_off */
	PKTGEN_F_IP4_CSUM = 1 << 0,
	/* pseudo-header checksum at l4_csum_off */
	PKTGEN_F_L4_CSUM = 1 << 1,
	/* UDP rules (RFC 768): a zero checksum means "none" (IPv4; in IPv6 it
	 * is invalid anyway) and is left alone; a computed zero is sent as
	 * 0xffff. */
	PKTGEN_F_L4_UDP = 1 << 2,
};

enum pktgen_stat {
	/* frames xdpl_pktgen returned XDP_TX for */
	PKTGEN_STAT_TX = 0,
	/* frames too short for the configured offsets (XDP_ABORTED) */
	PKTGEN_STAT_BAD_FRAME = 1,
	/* frames xdpl_count saw, */
	PKTGEN_STAT_RX = 2,
	/* ... of which not IPv4/IPv6, */
	PKTGEN_STAT_RX_OTHER = 3,
	/* ... or whose source found pktgen_seen full */
	PKTGEN_STAT_SEEN_FULL = 4,
	PKTGEN_STAT_MAX = 5,
};

enum pktgen_limits {
	/* Offsets above this are refused: no template needs more, and the
	 * verifier needs a bound on variable packet offsets. */
	PKTGEN_MAX_OFF = 1024,
	PKTGEN_SEEN_MAX = 1 << 16,
	/* Leading bytes of the template restored in every frame, in words. */
	PKTGEN_HDR_WORDS = 16,
};

/* Written by Go (a .bss global) before each run; read-only while it runs. */
struct pktgen_cfg {
	enum pktgen_mode mode;
	enum pktgen_flags flags;
	/* First source, host order: the IPv4 address, or for IPv6 the low 32
	 * bits (the template supplies the high 96). */
	__u32 base;
	/* PKTGEN_MODE_SEQ: number of sources, >= 1 */
	__u32 count;
	/* PKTGEN_MODE_RANDOM: bits of base replaced */
	__u32 mask;
	/* Frame offsets, filled by Go from the template. src_off is the
	 * 32-bit word of the source address that varies. */
	__u16 src_off;
	__u16 ip_csum_off;
	__u16 l4_csum_off;
	__u16 hdr_words; /* words of hdr to restore, <= PKTGEN_HDR_WORDS */
	/* The template's length: a page can come back from a receiver that
	 * changed its frame's length (an XDP program answering in place). */
	__u16 frame_len;
	__u16 pad[3];
	/* The template's first bytes (all its headers). Live-frames pages are
	 * recycled with whatever the receiver did to them: the stack's VLAN
	 * untagging moves the MAC header inside the page, and the next frame
	 * built in that page would be garbage. Every frame starts from these. */
	__u64 hdr[PKTGEN_HDR_WORDS];
};

/* Per-CPU generator state. Go resets it before each run, giving every CPU a
 * different starting cursor so concurrent CPUs emit different sources. */
struct pktgen_state {
	/* frames this CPU generated since the reset */
	__u64 seq;
	/* PKTGEN_MODE_SEQ: next index, < count */
	__u32 cursor;
	__u32 pad;
};

/* Key of pktgen_seen: a source address, IPv4 as ::ffff:a.b.c.d. */
struct pktgen_addr {
	__be32 addr[4];
};

#endif /* XDPLIMIT_PKTGEN_H */
