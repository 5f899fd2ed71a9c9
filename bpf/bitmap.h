/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The classifier's accumulator of rule bitmaps (classify.h and
 * classify_payload.h AND their dimensions' bitmaps into it). */
#ifndef XDPLIMIT_BITMAP_H
#define XDPLIMIT_BITMAP_H

#include <linux/types.h>
#include <bpf/bpf_helpers.h>
#include "xdplimit_structs.h"

struct xdpl_acc {
	__u64 w[XDPL_BITMAP_WORDS];
};

/* AND a bitmap into the accumulator; a missing entry matches no rule. */
static __always_inline int xdpl_and(struct xdpl_acc *acc, struct xdpl_bitmap *b)
{
	if (!b)
		return 0;
	__u64 any = 0;

#pragma unroll
	for (int i = 0; i < XDPL_BITMAP_WORDS; i++) {
		acc->w[i] &= b->w[i];
		any |= acc->w[i];
	}
	return any != 0;
}

#endif
