// SPDX-License-Identifier: Apache-2.0

package maps_test

import (
	"testing"

	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/maps"
)

// TestACLHostsReload: host entries are per generation like the tries'; a
// reload that drops a host from the deny list, or moves it to the allow
// list, takes effect at once, and the generation it replaced leaves no
// entry behind for the one after.
func TestACLHostsReload(t *testing.T) {
	const rules = "rules:\n  - name: all\n    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}\n"
	l := load(t, maps.ClockMap, rules+"deny: [192.0.2.10/32]\n")
	apply := func(yaml string) {
		if err := l.Apply(xdpltest.Compile(t, yaml)); err != nil {
			t.Fatal(err)
		}
	}
	pkt := udp4("192.0.2.10").MustBuild()
	flood := func(n int) string { return letters(repeatRun(t, l, pkt, n)) }
	for _, step := range []struct{ policy, want string }{
		{"", "PDD"}, // off the list: its own bucket, burst 1
		{"allow: [192.0.2.10/32]\n", "PPP"},
		{"deny: [192.0.2.10/32]\n", "DDD"},
		{"deny: [192.0.2.0/24]\n", "DDD"}, // now from the trie
		{"allow: [192.0.2.0/24]\ndeny: [192.0.2.10/32]\n", "DDD"},
		{"deny: [192.0.2.0/24]\nallow: [192.0.2.10/32]\n", "PPP"},
		{"", "DDD"}, // its bucket, spent in the first step
	} {
		apply(rules + step.policy)
		if got := flood(3); got != step.want {
			t.Errorf("with %q: %s, want %s", step.policy, got, step.want)
		}
	}
}
