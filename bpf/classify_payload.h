/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Payload matches: the classifier's dimension for bytes of the transport
 * payload. A rule's bytes lie in one window (a start and a mask of
 * XDPL_PAYLOAD_WINDOW bytes); the rules sharing a window are found by one
 * hash lookup of the packet's masked bytes there, so a generation costs one
 * load and one lookup per distinct window (at most XDPL_PAYLOAD_SHAPES),
 * whatever the number of rules. A window's entry holds the rules whose
 * bytes these are and every rule that does not read the window; absent
 * holds only the latter, for a value no rule names and for a payload that
 * ends before the window's last masked byte. */
#ifndef XDPLIMIT_CLASSIFY_PAYLOAD_H
#define XDPLIMIT_CLASSIFY_PAYLOAD_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "xdplimit_maps.h"
#include "bitmap.h"

/* ANDs into acc the rules that packet p's payload satisfies in generation
 * gen; 0 when none is left. A fragment (payload 0: the stack reassembles
 * it first) satisfies every payload rule, as its unknown ports satisfy
 * every port rule. A global function, verified once on its own: its loop
 * of loads and lookups stays out of the paths of the callers. */
__attribute__((noinline)) int xdpl_classify_payload(struct xdp_md *ctx, struct xdpl_pkt *p,
						    __u32 gen, struct xdpl_acc *acc)
{
	if (!ctx || !p || !acc)
		return 0;
	if (p->payload == 0)
		return 1;
	gen &= 1;
	struct xdpl_payload_cfg *cfg = bpf_map_lookup_elem(&xdpl_payload_shapes, &gen);

	if (!cfg)
		return 0;
	__u32 n = cfg->nshapes, len = p->payload_len, at = p->payload;

	for (__u32 i = 0; i < XDPL_PAYLOAD_SHAPES; i++) {
		if (i >= n)
			break;
		struct xdpl_payload_shape *s = &cfg->shape[i];
		struct xdpl_bitmap *b = &s->absent;
		/* 1 to XDPL_PAYLOAD_WINDOW in terms the verifier keeps (the
		 * control plane writes no 0). */
		__u32 need = ((s->need - 1) & (XDPL_PAYLOAD_WINDOW - 1)) + 1, off = s->off;

		if (off + need <= len) {
			struct xdpl_payload_key k = {.gen_shape = gen * XDPL_PAYLOAD_SHAPES + i};
			__u64 *kw = (__u64 *)k.bytes, *mw = (__u64 *)s->mask;

			if (bpf_xdp_load_bytes(ctx, at + off, k.bytes, need))
				return 0;
			kw[0] &= mw[0];
			kw[1] &= mw[1];
			struct xdpl_bitmap *v = bpf_map_lookup_elem(&xdpl_payload, &k);

			if (v)
				b = v;
		}
		if (!xdpl_and(acc, b))
			return 0;
	}
	return 1;
}

#endif
