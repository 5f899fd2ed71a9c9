// SPDX-License-Identifier: Apache-2.0

// Package fmix is bpf/hash.h's xdpl_fmix64 in Go: where user space must
// hash as the datapath does (the IPv4 state table's sets, the packet
// generator's sources).
package fmix

// Fmix64 is murmur3's 64-bit finaliser: a bijection that spreads every
// input bit over the whole word.
func Fmix64(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}
