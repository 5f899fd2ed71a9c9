// SPDX-License-Identifier: Apache-2.0

package conversation

import (
	"net/netip"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/maps"
)

// TestGuard drives a guard through an attack: armed at the first reading
// over the rate, kept armed while it hovers above half of it, disarmed
// only after Hold below half.
func TestGuard(t *testing.T) {
	g := &Guard{Rate: 1000, Hold: 10 * time.Second}
	dst := netip.MustParseAddr("198.51.100.1")
	watch := make([]maps.WatchSlot, 4)
	at := time.Unix(1000, 0)
	total := uint64(0)
	// step adds rate packets a second at slot 2 for one second.
	step := func(rate uint64) *Change {
		total += rate
		watch[2] = maps.WatchSlot{Packets: total, Destination: dst, Protocol: 17, Port: 5354}
		at = at.Add(time.Second)
		return g.Observe(at, watch)
	}
	if c := g.Observe(at, watch); c != nil {
		t.Fatalf("the first reading changed %+v", c)
	}
	for _, r := range []uint64{0, 500, 999} {
		if c := step(r); c != nil || g.Armed() {
			t.Fatalf("%d/s armed the check: %+v", r, c)
		}
	}
	c := step(1000)
	if c == nil || !c.Armed || !g.Armed() || c.Destination != dst || c.Port != 5354 || c.Rate != 1000 {
		t.Fatalf("1000/s: change %+v, want armed by %v:5354 at 1000/s", c, dst)
	}
	// Above half the rate, however long, it stays armed; a dip below
	// half shorter than Hold does not disarm either.
	for i := 0; i < 30; i++ {
		r := uint64(600)
		if i%5 == 0 {
			r = 100
		}
		if c := step(r); c != nil {
			t.Fatalf("second %d at %d/s: %+v", i, r, c)
		}
	}
	for i := 0; i < 10; i++ {
		if c := step(100); c != nil {
			t.Fatalf("disarmed after %d s below half, want %v", i+1, g.Hold)
		}
	}
	if c := step(100); c == nil || c.Armed || g.Armed() {
		t.Fatalf("after the hold below half: %+v, armed %v; want disarmed", c, g.Armed())
	}
	// A count that went down (a new limiter) is not a negative rate.
	total = 0
	if c := step(5); c != nil || g.Armed() {
		t.Fatalf("after a reset: %+v", c)
	}
}
