// SPDX-License-Identifier: Apache-2.0

package geoip

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/xdplimit/xdplimit/gen"
)

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

func TestMerge(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"192.0.2.0/24", "192.0.2.0/24"},
		{"192.0.2.0/25 192.0.2.128/25", "192.0.2.0/24"},
		{"192.0.2.128/25 192.0.2.0/25", "192.0.2.0/24"},
		// Halves join upwards, more than once.
		{"10.0.0.0/26 10.0.0.64/26 10.0.0.128/25 10.0.1.0/24", "10.0.0.0/23"},
		// Neighbours that are not halves of one prefix stay apart.
		{"10.0.1.0/24 10.0.2.0/24", "10.0.1.0/24 10.0.2.0/24"},
		{"192.0.2.0/24 192.0.2.16/28 192.0.2.0/24", "192.0.2.0/24"},
		{"192.0.2.16/28 192.0.2.0/24", "192.0.2.0/24"},
		{"0.0.0.0/1 128.0.0.0/1", "0.0.0.0/0"},
		{"0.0.0.0/0 0.0.0.0/0", "0.0.0.0/0"},
		{"2001:db8::/33 2001:db8:8000::/33 2001:db9::/32", "2001:db8::/31"},
	} {
		var in []netip.Prefix
		if c.in != "" {
			in = prefixes(strings.Fields(c.in)...)
		}
		got := strings.Join(strs(Merge(in)), " ")
		if got != c.want {
			t.Errorf("Merge(%s) = %s, want %s", c.in, got, c.want)
		}
	}
}

// Random prefixes inside 10.0.0.0/20: Merge covers exactly the same
// addresses (all 4096 checked), sorted, none nested, no two halves of one.
func TestMergeRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	base := netip.MustParseAddr("10.0.0.0").As4()
	for round := range 300 {
		var in []netip.Prefix
		for range 1 + rng.IntN(60) {
			off := rng.Uint32N(4096)
			a := binary.BigEndian.Uint32(base[:]) + off
			var b [4]byte
			binary.BigEndian.PutUint32(b[:], a)
			p, _ := netip.AddrFrom4(b).Prefix(20 + rng.IntN(13))
			in = append(in, p)
		}
		orig := slices.Clone(in)
		out := Merge(in)
		for off := range uint32(4096) {
			var b [4]byte
			binary.BigEndian.PutUint32(b[:], binary.BigEndian.Uint32(base[:])+off)
			a := netip.AddrFrom4(b)
			inOrig := slices.ContainsFunc(orig, func(p netip.Prefix) bool { return p.Contains(a) })
			inOut := slices.ContainsFunc(out, func(p netip.Prefix) bool { return p.Contains(a) })
			if inOrig != inOut {
				t.Fatalf("round %d: %v covered %v before, %v after: %v -> %v", round, a, inOrig, inOut, orig, out)
			}
		}
		for i := 1; i < len(out); i++ {
			a, b := out[i-1], out[i]
			if comparePrefix(a, b) >= 0 || a.Overlaps(b) {
				t.Fatalf("round %d: %v then %v", round, a, b)
			}
			pa, _ := a.Addr().Prefix(a.Bits() - 1)
			pb, _ := b.Addr().Prefix(b.Bits() - 1)
			if a.Bits() == b.Bits() && pa == pb {
				t.Fatalf("round %d: %v and %v are halves of %v", round, a, b, pa)
			}
		}
	}
}

// The per-entry estimates follow from the datapath's trie keys (gen), the
// kernel's trie node header and its allocation size classes.
func TestEntryBytes(t *testing.T) {
	const nodeHeader, allocHeader = 40, 8 // struct lpm_trie_node; bpf_mem_alloc's llist_node
	sizeClass := func(n int) int {
		for _, c := range []int{8, 16, 32, 64, 96, 128, 192, 256, 512} {
			if n <= c {
				return c
			}
		}
		t.Fatalf("node of %d bytes", n)
		return 0
	}
	entry := func(key, value any) int {
		data := binary.Size(key) - 4 // the key's prefixlen word is not stored
		return sizeClass(allocHeader+nodeHeader+data+binary.Size(value)) + sizeClass(allocHeader+nodeHeader+data)
	}
	acl, rules := uint32(0), gen.XdplimitXdplBitmap{} // the values of the allow/deny and the rules' tries
	for _, c := range []struct {
		name      string
		key, val  any
		got, want int
	}{
		{"IPv4 allow/deny", gen.XdplimitXdplLpm4{}, acl, 0, EntryBytes4},
		{"IPv6 allow/deny", gen.XdplimitXdplLpm6{}, acl, 0, EntryBytes6},
		{"IPv4 rule", gen.XdplimitXdplLpm4{}, rules, 0, RuleEntryBytes4},
		{"IPv6 rule", gen.XdplimitXdplLpm6{}, rules, 0, RuleEntryBytes6},
	} {
		if got := entry(c.key, c.val); got != c.want {
			t.Errorf("%s entry: %d bytes, the constant says %d", c.name, got, c.want)
		}
	}
	if got := TrieBytes(1, 2, true); got != RuleEntryBytes4+2*RuleEntryBytes6 {
		t.Errorf("TrieBytes: %d", got)
	}
}

func TestIntersect(t *testing.T) {
	p := func(ss ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, s := range ss {
			out = append(out, netip.MustParsePrefix(s))
		}
		return out
	}
	for _, c := range []struct{ a, b, want []netip.Prefix }{
		{p("10.0.0.0/8"), p("10.1.0.0/16", "10.2.3.0/24", "11.0.0.0/8"), p("10.1.0.0/16", "10.2.3.0/24")},
		{p("10.1.0.0/16", "10.2.3.0/24", "11.0.0.0/8"), p("10.0.0.0/8"), p("10.1.0.0/16", "10.2.3.0/24")},
		{p("10.0.0.0/24", "192.0.2.0/24", "2001:db8::/32"), p("192.0.2.128/25", "2001:db8:1::/48", "2001:db9::/32"),
			p("192.0.2.128/25", "2001:db8:1::/48")},
		{p("0.0.0.0/0", "::/0"), p("198.51.100.0/24", "2001:db8::/32"), p("198.51.100.0/24", "2001:db8::/32")},
		{p("198.51.100.0/24"), p("2001:db8::/32"), nil},
		{nil, p("10.0.0.0/8"), nil},
	} {
		if got := Intersect(c.a, c.b); !slices.Equal(got, c.want) {
			t.Errorf("Intersect(%v, %v) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
	in := p("2001:db8::/33", "10.0.1.0/24", "2001:db8:8000::/33", "10.0.0.0/24", "10.0.0.0/16")
	if got, want := MergeAll(in), p("10.0.0.0/16", "2001:db8::/32"); !slices.Equal(got, want) {
		t.Errorf("MergeAll = %v, want %v", got, want)
	}
	if in[0] != netip.MustParsePrefix("2001:db8::/33") {
		t.Errorf("MergeAll changed its argument: %v", in)
	}
}
