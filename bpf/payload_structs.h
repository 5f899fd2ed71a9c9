/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The payload matches' map keys and values (classify_payload.h), shared
 * with Go through bpf2go. */
#ifndef XDPLIMIT_PAYLOAD_STRUCTS_H
#define XDPLIMIT_PAYLOAD_STRUCTS_H

#include <linux/types.h>
#include "xdplimit_consts.h"
#include "xdplimit_structs.h"

/* One payload window of a generation (classify_payload.h): the rules that
 * read it are found by the masked bytes' value (xdpl_payload); the others
 * are in every value's bitmap, and in absent, which also answers a packet
 * whose payload ends before the window's need bytes. */
struct xdpl_payload_shape {
	__u16 off; /* from the transport payload's start */
	__u8 need; /* bytes read: the last masked one + 1, 1 to XDPL_PAYLOAD_WINDOW */
	__u8 pad[5];
	__u8 mask[XDPL_PAYLOAD_WINDOW];
	struct xdpl_bitmap absent;
};

struct xdpl_payload_cfg {
	__u32 nshapes;
	__u32 pad;
	struct xdpl_payload_shape shape[XDPL_PAYLOAD_SHAPES];
	/* What a packet without payload satisfies: every window's absent
	 * (the SYN a cookie ACK's connection began with, syncookie.h). */
	struct xdpl_bitmap empty;
};

struct xdpl_payload_key {
	__u32 gen_shape; /* gen * XDPL_PAYLOAD_SHAPES + shape */
	__u32 pad;
	__u8 bytes[XDPL_PAYLOAD_WINDOW];
} __attribute__((aligned(8))); /* the bytes are masked as two words */

#endif
