// SPDX-License-Identifier: Apache-2.0

package fleet

// The floods of the end-to-end tests: one source spread over several hosts
// as ECMP spreads it, each host's share paced by fleetlab.

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testkit/fleetlab"
)

// spread is one source flooding several hosts evenly, as ECMP spreads a
// source with many ports: the same address everywhere, each host its own
// range of source ports (flows).
type spread struct {
	Hosts []int
	// Rate is the total frames per second, split evenly over Hosts; Dur
	// the time each flood lasts (its count is its rate x Dur).
	Rate float64
	Dur  time.Duration
	// Src is the source address (default 198.51.100.7); Sources > 1
	// walks consecutive addresses from it.
	Src     netip.Addr
	Sources uint32
	// DstPort defaults to 9, the port the tests' rules match.
	DstPort uint16
}

// spreadResult is what the generator sent.
type spreadResult struct {
	Sent    []uint64 // by host index
	Total   uint64
	Elapsed time.Duration     // the longest of the floods
	Gaps    [][]time.Duration // by host index: the flood's lapses (fleetlab.FloodResult)
}

// lostRefill bounds the refill a limiter that remembers at most memory of
// it (a token bucket's burst over its rate) can have lost to the floods'
// lapses: only while no host sent, so at most the least any flooded host
// lapsed beyond memory.
func (r spreadResult) lostRefill(hosts []int, memory time.Duration) time.Duration {
	lost := time.Duration(-1)
	for _, i := range hosts {
		var d time.Duration
		for _, g := range r.Gaps[i] {
			d += max(0, g-memory)
		}
		if lost < 0 || d < lost {
			lost = d
		}
	}
	return max(lost, 0)
}

// floodSpread runs the floods of s at once (fleetlab paces each, in 10 ms
// chunks, each chunk from the next of the host's 64 source ports) and
// returns when all are done. Each is bounded by its count and by a hard
// timeout of Dur + 15 s.
func floodSpread(t *testing.T, l *fleetlab.Lab, s spread) spreadResult {
	t.Helper()
	return spreadAsync(l, s)(t)
}

// spreadAsync starts the floods of s and returns at once, for faults
// injected while they run; wait collects them on the test's goroutine,
// where t.Fatal belongs.
func spreadAsync(l *fleetlab.Lab, s spread) (wait func(t *testing.T) spreadResult) {
	return spreadUntil(context.Background(), l, s)
}

// spreadUntil is spreadAsync for floods that run until ctx is canceled
// (then they end without an error), or until s.Dur at the most: for a
// flood that must outlast what the test waits for, however long that takes
// on this machine.
func spreadUntil(ctx context.Context, l *fleetlab.Lab, s spread) (wait func(t *testing.T) spreadResult) {
	if !s.Src.IsValid() {
		s.Src = netip.MustParseAddr("198.51.100.7")
	}
	if s.DstPort == 0 {
		s.DstPort = 9
	}
	rate := s.Rate / float64(len(s.Hosts))
	res := spreadResult{Sent: make([]uint64, l.Hosts()), Gaps: make([][]time.Duration, l.Hosts())}
	errs := make([]error, len(s.Hosts))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for k, i := range s.Hosts {
		wg.Go(func() {
			first := uint16(20000 + 1000*i)
			r, err := l.Flood(ctx, i, fleetlab.Flood{
				Count: uint64(rate * s.Dur.Seconds()), Src: s.Src, Sources: s.Sources,
				SrcPorts: [2]uint16{first, first + 63}, DstPort: s.DstPort, Payload: 18,
				Rate: rate, Timeout: s.Dur + 15*time.Second,
			})
			mu.Lock()
			defer mu.Unlock()
			res.Sent[i], res.Gaps[i], errs[k] = r.Sent, r.Gaps, err
			res.Total += r.Sent
			res.Elapsed = max(res.Elapsed, r.Elapsed)
		})
	}
	return func(t *testing.T) spreadResult {
		t.Helper()
		wg.Wait()
		for _, err := range errs {
			if err != nil && !(ctx.Err() != nil && errors.Is(err, context.Canceled)) {
				t.Fatal(err)
			}
		}
		return res
	}
}
