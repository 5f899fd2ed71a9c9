// SPDX-License-Identifier: Apache-2.0

package maps_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/model"
)

// TestSlidingWindowShare: a sliding window counts exactly the previous
// window's share still inside it, rounded down, at its edge. A full
// previous window of 10 weighs 5 at exactly half way through the next, so
// a source is admitted 5 more there and refused the sixth (its estimate
// reaches the limit exactly); one ns later the share is 4 and 6 pass.
// Random traces rarely land on such an edge. Both a window that keeps the
// ns and one reckoned in 64 ns units (1 s), each against the model.
func TestSlidingWindowShare(t *testing.T) {
	for _, w := range []time.Duration{10 * time.Millisecond, time.Second} {
		t.Run(w.String(), func(t *testing.T) {
			p, err := model.WindowParams(model.AlgSlidingWindow, 10, w)
			if err != nil {
				t.Fatal(err)
			}
			l := loadWith(t, maps.Options{Clock: maps.ClockMap, TrackAfter: 1},
				fmt.Sprintf("rules:\n  - name: r\n    limit: {algorithm: sliding_window, packets: 10, window: %v}\n", w))
			start := (uint64(t0)/uint64(w) + 2) * uint64(w) // a window's start
			for i, c := range []struct {
				src   string
				at    uint64 // into the next window
				admit int
			}{{"192.0.2.1", uint64(w) / 2, 5}, {"192.0.2.2", uint64(w)/2 + 1, 6}} {
				pkt := udp4(c.src).MustBuild()
				var s model.State
				send := func(now uint64) bool {
					want := s.Admit(p, now, 1)
					got := xdpltest.Run(t, l, pkt, time.Duration(now)) == xdpPass
					if got != want {
						t.Fatalf("%s at %d: program admits %v, model %v", c.src, now, got, want)
					}
					return got
				}
				// Ten in the first window, spread over it.
				for k := uint64(0); k < 10; k++ {
					if !send(start + uint64(i) + k*uint64(w)/10) {
						t.Fatalf("%s: packet %d of the first window refused", c.src, k)
					}
				}
				n := 0
				for n < 20 && send(start+uint64(w)+c.at) {
					n++
				}
				if n != c.admit {
					t.Errorf("%s: %d admitted %d ns into the next window, want %d", c.src, n, c.at, c.admit)
				}
			}
		})
	}
}
