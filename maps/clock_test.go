package maps_test

import (
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
// interval) shows the clock the program read. Two loads: the second
// measures its own offset.
func TestCoarseClockIsMonotonic(t *testing.T) {
	tick := time.Duration(maps.CoarseTick())
	for load := 0; load < 2; load++ {
		l := loadWith(t, maps.Options{Clock: maps.ClockCoarse}, `
rules:
  - name: r
    limit: {algorithm: token_bucket, rate: 1/s, burst: 5}
`)
		pkt := udp4("192.0.2.3").bytes(t)
		before := monotonic(t)
		if _, err := l.Program().Run(&ebpf.RunOptions{Data: pkt, Repeat: 1}); err != nil {
			t.Fatal(err)
		}
		after := monotonic(t)
		var (
			key   gen.XdplimitXdplKey4
			state gen.XdplimitXdplState
			n     int
		)
		it := l.Map(maps.Sources4Map).Iterate()
		for it.Next(&key, &state) {
			n++
		}
		if err := it.Err(); err != nil || n != 1 {
			t.Fatalf("load %d: %d state entries (%v), want the source's", load, n, err)
		}
		// tat is in 1/16 ns: (now + 1 s) << XDPL_TIME_SHIFT.
		now := time.Duration(state.A>>gen.XdplimitXdplConstXDPL_TIME_SHIFT) - time.Second
		if now < before-2*tick || now > after+tick {
			t.Errorf("load %d: the coarse clock read %v, CLOCK_MONOTONIC was %v to %v (tick %v)", load, now, before, after, tick)
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
