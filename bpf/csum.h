/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The Internet checksum: the incremental update shared by the generator and
 * the limiter's benchmark source rotation, and the fold the parser's IPv4
 * header check uses. */
#ifndef XDPL_CSUM_H
#define XDPL_CSUM_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/* RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m') for a 32-bit field changing from
 * 'from' to 'to'. The one's-complement sum is byte-order independent, so the
 * raw network-order words are summed as loaded. */
static __always_inline __u16 csum_replace4(__u16 csum, __u32 from, __u32 to)
{
	__u32 sum = (__u16)~csum;

	sum += (~from & 0xffff) + (~from >> 16);
	sum += (to & 0xffff) + (to >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

/* Folds a sum of 32-bit words (fewer than 2^32 of them) to 16 bits, as
 * ip_fast_csum does: 0xffff when the words summed include a correct
 * checksum. */
static __always_inline __u32 csum_fold32s(__u64 sum)
{
	sum = (sum & 0xffffffff) + (sum >> 32);
	sum = (sum & 0xffffffff) + (sum >> 32);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return sum;
}

#endif
