// SPDX-License-Identifier: Apache-2.0

package compiler

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/policy"
)

// lookup is the datapath's trie lookup: the entry of the longest prefix
// holding a.
func lookup(entries []maps.PrefixBitmap, a netip.Addr) (maps.PrefixBitmap, bool) {
	var best maps.PrefixBitmap
	found := false
	for _, e := range entries {
		if e.Prefix.Contains(a) && (!found || e.Prefix.Bits() > best.Prefix.Bits()) {
			best, found = e, true
		}
	}
	return best, found
}

// TestPrefixBitmapsAgree: for random rules of nested, overlapping and
// disjoint prefixes (and rules constrained to nothing, as a country with
// no network), the longest matching entry of every address carries exactly
// the rules with a prefix holding that address.
func TestPrefixBitmapsAgree(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	randPrefix := func() netip.Prefix {
		if r.IntN(4) == 0 {
			a := [16]byte{0x20, 0x01, 0x0d, 0xb8, byte(r.IntN(4))}
			return netip.PrefixFrom(netip.AddrFrom16(a), 32+r.IntN(9)).Masked()
		}
		a := [4]byte{10, byte(r.IntN(4)), byte(r.IntN(256)), byte(r.IntN(256))}
		return netip.PrefixFrom(netip.AddrFrom4(a), 8+r.IntN(25)).Masked()
	}
	for round := range 50 {
		rules := make([]policy.Rule, 1+r.IntN(6))
		srcs := make([][]netip.Prefix, len(rules))
		constrained := make([]bool, len(rules))
		for i := range rules {
			constrained[i] = r.IntN(5) != 0
			for range r.IntN(8) {
				srcs[i] = append(srcs[i], randPrefix())
			}
			if !constrained[i] {
				srcs[i] = nil
			}
		}
		entries := prefixBitmaps(rules, func(m *policy.Match) ([]netip.Prefix, bool) {
			i := 0
			for &rules[i].Match != m {
				i++
			}
			return srcs[i], constrained[i]
		})
		for range 500 {
			p := randPrefix()
			a := p.Addr()
			e, ok := lookup(entries, a)
			if !ok {
				t.Fatalf("round %d: no entry holds %v", round, a)
			}
			for i := range rules {
				want := !constrained[i]
				for _, s := range srcs[i] {
					want = want || s.Contains(a)
				}
				if got := has(e.Rules, i); got != want {
					t.Fatalf("round %d: %v (entry %v): rule %d matches %v, want %v (its prefixes %v, constrained %v)",
						round, a, e.Prefix, i, got, want, srcs[i], constrained[i])
				}
			}
		}
	}
}
