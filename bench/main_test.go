// SPDX-License-Identifier: Apache-2.0

package main

import "testing"

// A quick or partial run never writes the committed report or chart unless
// told to.
func TestDefaultOut(t *testing.T) {
	for _, c := range []struct {
		quick, partial bool
		want           string
	}{
		{false, false, "BENCHMARKS.md"},
		{true, false, "bench/out/partial.md"},
		{false, true, "bench/out/partial.md"},
		{true, true, "bench/out/partial.md"},
	} {
		if got := defaultOut(c.quick, c.partial, "BENCHMARKS.md", "partial.md"); got != c.want {
			t.Errorf("quick %v, partial %v: %s, want %s", c.quick, c.partial, got, c.want)
		}
	}
}
