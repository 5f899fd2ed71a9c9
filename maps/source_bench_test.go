// SPDX-License-Identifier: Apache-2.0

package maps_test

import (
	"net/netip"
	"testing"

	"github.com/xdplimit/xdplimit/maps"
)

// BenchmarkSource: what one `status --source` or GET /v1/sources/ADDR
// costs in map reads, for the policy of TestSourceLevels (4 rules).
func BenchmarkSource(b *testing.B) {
	l := loadWith(b, maps.Options{Clock: maps.ClockMap, TrackAfter: 1}, sourcePolicy)
	if err := l.SetClock(uint64(t0)); err != nil {
		b.Fatal(err)
	}
	addr := netip.MustParseAddr("10.1.2.3")
	for b.Loop() {
		if _, err := l.Source(addr, 53); err != nil {
			b.Fatal(err)
		}
	}
}
