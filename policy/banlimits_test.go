// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"strings"
	"testing"
)

func TestBanLimitsSection(t *testing.T) {
	want := func(w BanLimits) func(*testing.T, *Policy) {
		return func(t *testing.T, p *Policy) {
			if p.Bans != w {
				t.Fatalf("bans = %+v, want %+v", p.Bans, w)
			}
		}
	}
	def := DefaultBanLimits()
	set := def
	set.Set = true
	runParseCases(t, []parseCase{
		{name: "absent", src: "rules: []\n", check: want(def)},
		{name: "empty", src: "bans: {}\nrules: []\n", check: want(set)},
		{name: "all", src: "bans:\n  min_prefix: {ipv4: 16, ipv6: 48}\n  max_imported: 500\n  max_per_sync: 50\nrules: []\n",
			check: want(BanLimits{MinPrefixIPv4: 16, MinPrefixIPv6: 48, MaxImported: 500, MaxPerSync: 50, Set: true})},
		{name: "one family", src: "bans: {min_prefix: {ipv6: 64}}\nrules: []\n",
			check: want(BanLimits{MinPrefixIPv4: 8, MinPrefixIPv6: 64, MaxImported: 10000, MaxPerSync: 1000, Set: true})},
		{name: "the whole internet, knowingly", src: "bans: {min_prefix: {ipv4: 0, ipv6: 0}, max_imported: 0}\nrules: []\n",
			check: want(BanLimits{MaxImported: 0, MaxPerSync: 1000, Set: true})},

		{name: "ipv4 over 32", src: "bans:\n  min_prefix: {ipv4: 33}\nrules: []\n", errs: []string{
			`p.yaml:2:22: bans.min_prefix.ipv4: ipv4 "33": a prefix length from 0 to 32`}},
		{name: "ipv6 negative", src: "bans:\n  min_prefix: {ipv6: -1}\nrules: []\n", errs: []string{
			`p.yaml:2:22: bans.min_prefix.ipv6: ipv6 "-1": a prefix length from 0 to 128`}},
		{name: "per sync zero", src: "bans:\n  max_per_sync: 0\nrules: []\n", errs: []string{
			`p.yaml:2:17: bans.max_per_sync: max_per_sync "0": a whole number of bans from 1 to 100000`}},
		{name: "imported words", src: "bans:\n  max_imported: lots\nrules: []\n", errs: []string{
			`p.yaml:2:17: bans.max_imported: max_imported "lots": a whole number of bans from 0 to 4194304`}},
		{name: "unknown field", src: "bans: {min_prefx: 8}\nrules: []\n", errs: []string{
			`p.yaml:1:8: bans: unknown field "min_prefx" (did you mean "min_prefix"?); allowed: min_prefix, max_imported, max_per_sync`}},
		{name: "min_prefix not a mapping", src: "bans: {min_prefix: 8}\nrules: []\n", errs: []string{
			`p.yaml:1:20: bans.min_prefix: expected a mapping with fields ipv4, ipv6, got 8`}},
	})
}

// `policy check` prints the limits when they matter: with a bans: section
// or a fleet (which imports bans).
func TestBanLimitsDescribe(t *testing.T) {
	for _, c := range []struct {
		src, want string
	}{
		{"bans: {max_per_sync: 5}\nrules: []\n",
			"bans from the fleet and feeds: no wider than ipv4 /8, ipv6 /32; at most 10000 held, 5 applied per sync\n"},
		{"rules: []\n", ""},
	} {
		p, err := Parse("p.yaml", []byte(c.src))
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		p.Describe(&b)
		if got := strings.Contains(b.String(), "bans from the fleet"); got != (c.want != "") || !strings.Contains(b.String(), c.want) {
			t.Errorf("%q: Describe:\n%s\nwant the line %q", c.src, b.String(), c.want)
		}
	}
}
