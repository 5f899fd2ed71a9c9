/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Hashing shared by the limiter and the traffic generator. */
#ifndef XDPLIMIT_HASH_H
#define XDPLIMIT_HASH_H

#include <linux/types.h>
#include <bpf/bpf_helpers.h>

/* The next state of a xorshift32 generator (non-zero stays non-zero): the
 * samplers' per-CPU random numbers, seeded from Go, cheaper on their paths
 * than a helper call for randomness. */
static __always_inline __u32 xdpl_xorshift32(__u32 x)
{
	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	return x;
}

/* murmur3's 64-bit finaliser (fmix64): a bijection that spreads every input
 * bit over the whole word, so distinct inputs never collide before a caller
 * truncates the result. */
static __always_inline __u64 xdpl_fmix64(__u64 h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return h;
}

#endif
