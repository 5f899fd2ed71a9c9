// SPDX-License-Identifier: Apache-2.0

package maps_test

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/gen"
	"github.com/xdplimit/xdplimit/maps"
)

// TestCoarseClockIsMonotonic: the coarse clock counts jiffies, offset by the
// first packet after each load so that it reads CLOCK_MONOTONIC to within a
// tick, like the fine clock. The time a token bucket stores after one packet
// from a fresh source (its theoretical arrival time: now + one emission
// interval) shows the clock the program read. A second source about 300 ms
// later shows that jiffies are scaled right (a wrong tick would be off by a
// multiple of the gap): the gap is the one measured around the two runs,
// however long the sleep really took. Two loads: the second measures its
// own offset. The lower bounds leave room for ticks that come late (50 ms,
// as under emulation), the upper ones for one tick of the coarse clock.
func TestCoarseClockIsMonotonic(t *testing.T) {
	tick := time.Duration(maps.CoarseTick())
	const gap, late = 300 * time.Millisecond, 50 * time.Millisecond
	for load := 0; load < 2; load++ {
		l := loadWith(t, maps.Options{Clock: maps.ClockCoarse}, `
rules:
  - name: r
    limit: {algorithm: token_bucket, rate: 1/s, burst: 5}
`)
		read := func(src string) (now, before, after time.Duration) {
			before = monotonic(t)
			if _, err := l.Program().Run(&ebpf.RunOptions{Data: udp4(src).MustBuild(), Repeat: 1}); err != nil {
				t.Fatal(err)
			}
			after = monotonic(t)
			err := l.WalkIPv4States(func(_, addr uint32, state gen.XdplimitXdplState) {
				if addr == binary.NativeEndian.Uint32(netip.MustParseAddr(src).AsSlice()) {
					// tat is in 1/16 ns: (now + 1 s) << XDPL_TIME_SHIFT.
					now = time.Duration(state.A>>gen.XdplimitXdplConstXDPL_TIME_SHIFT) - time.Second
				}
			})
			if err != nil || now == 0 {
				t.Fatalf("load %d: no state entry for %s (%v)", load, src, err)
			}
			if now < before-late || now > after+tick {
				t.Errorf("load %d, %s: the coarse clock read %v, CLOCK_MONOTONIC was %v to %v (tick %v)",
					load, src, now, before, after, tick)
			}
			return now, before, after
		}
		first, b1, a1 := read("192.0.2.3")
		time.Sleep(gap)
		second, b2, a2 := read("192.0.2.4")
		// Either read may lag real time (each is allowed late above): a
		// first read that lags makes the advance look longer by as much.
		// In a VM under software emulation the tick's interrupt itself
		// comes late (308 ms seen for runs 302 to 304 ms apart, tick 4 ms).
		if d, lo, hi := second-first, b2-a1, a2-b1; d < lo-late || d > hi+late {
			t.Errorf("load %d: the coarse clock advanced %v between runs %v to %v apart", load, d, lo, hi)
		}
	}
}

func monotonic(t *testing.T) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ts.Nano())
}
