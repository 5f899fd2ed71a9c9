// SPDX-License-Identifier: Apache-2.0

package geoip

import (
	"net/netip"
	"slices"
)

// Merge returns the smallest sorted list of prefixes that covers exactly
// the addresses of ps (one family, masked): prefixes inside another are
// dropped, two halves of one prefix become that prefix, again and again.
// It reuses ps's array. Linear when ps is sorted, as a database walk
// yields it; otherwise it sorts first.
func Merge(ps []netip.Prefix) []netip.Prefix {
	if !slices.IsSortedFunc(ps, comparePrefix) {
		slices.SortFunc(ps, comparePrefix)
	}
	out := ps[:0]
	for _, p := range ps {
		// Sorted by address, then length: a prefix that holds p is the
		// last kept one, if any (kept prefixes are disjoint and ascending).
		if n := len(out); n > 0 && out[n-1].Overlaps(p) {
			continue
		}
		out = append(out, p)
		// Join halves while the last two are siblings.
		for n := len(out); n >= 2; n = len(out) {
			a, b := out[n-2], out[n-1]
			if a.Bits() != b.Bits() || a.Bits() == 0 {
				break
			}
			pa, _ := a.Addr().Prefix(a.Bits() - 1)
			pb, _ := b.Addr().Prefix(b.Bits() - 1)
			if pa != pb {
				break
			}
			out = append(out[:n-2], pa)
		}
	}
	return slices.Clip(out)
}

// MergeAll is Merge of prefixes of both families, into a new slice: the
// IPv4 ones merged, then the IPv6 ones (the order Intersect reads).
func MergeAll(ps []netip.Prefix) []netip.Prefix {
	var v4, v6 []netip.Prefix
	for _, p := range ps {
		if p.Addr().Is4() {
			v4 = append(v4, p)
		} else {
			v6 = append(v6, p)
		}
	}
	return append(Merge(v4), Merge(v6)...)
}

func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}

// Estimated kernel memory of one prefix in an allow/deny trie of the
// datapath (bpf/xdplimit_maps.h: BPF_MAP_TYPE_LPM_TRIE, key struct
// xdpl_lpm4/xdpl_lpm6 of 12/24 bytes, value __u32). A trie node is a
// 40-byte header (rcu_head, two child pointers, prefixlen, flags), the
// key without its prefixlen word (8/20 bytes) and the value, plus an
// 8-byte allocator header on kernels whose trie uses bpf_mem_alloc; the
// kernel rounds that up to its size classes (64, 96, 128, 192, ...). A
// prefix costs its node and at most one intermediate node (no value):
// IPv4 64+64, IPv6 96+96. A test recomputes these from gen's key structs.
// While the datapath switches generations, both hold their entries: peak
// memory is twice this.
const (
	EntryBytes4 = 128
	EntryBytes6 = 192
)

// The same for a rule's source trie (xdpl_src4, xdpl_src6: the same keys,
// the bitmap of the rules, 32 bytes, as value): IPv4 96+64, IPv6 128+96.
const (
	RuleEntryBytes4 = 160
	RuleEntryBytes6 = 224
)

// MemoryBytes estimates the kernel memory of the set in an allow/deny
// trie, for policy check (EntryBytes4 and EntryBytes6 per prefix).
func (s Set) MemoryBytes() uint64 { return TrieBytes(len(s.V4), len(s.V6), false) }

// TrieBytes estimates the kernel memory of v4 IPv4 and v6 IPv6 prefixes in
// an allow/deny trie, or with rules in a rule's source trie.
func TrieBytes(v4, v6 int, rules bool) uint64 {
	if rules {
		return uint64(v4)*RuleEntryBytes4 + uint64(v6)*RuleEntryBytes6
	}
	return uint64(v4)*EntryBytes4 + uint64(v6)*EntryBytes6
}

// Intersect returns the addresses both a and b cover, as Merge's lists
// (sorted, disjoint; both families may be in each): where a prefix of one
// holds a prefix of the other, the longer is in both. Linear.
func Intersect(a, b []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for i, j := 0, 0; i < len(a) && j < len(b); {
		x, y := a[i], b[j]
		switch {
		case x.Overlaps(y) && x.Bits() >= y.Bits():
			out = append(out, x)
			i++
		case x.Overlaps(y):
			out = append(out, y)
			j++
		case x.Addr().Less(y.Addr()):
			i++ // disjoint and sorted: x ends before y starts
		default:
			j++
		}
	}
	return out
}
