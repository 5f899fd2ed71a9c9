// SPDX-License-Identifier: Apache-2.0

package fleet

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testkit/fleetlab"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
)

// Fixed windows at fleet scope: the windows of every host are aligned to
// the wall clock (whole seconds here), so the fleet's admissions per window
// are read by sampling every host's pass counter once per window, late in
// it (at 0.7 s), when the flood at ten times the limit has long exhausted
// it (and the shares held for hosts that had not reported are released
// two syncs after the window opened).
const (
	fwLimit  = tbRate // packets per window
	fwWindow = time.Second
	fwSample = 700 * time.Millisecond // into each window
	// fwSpent is how far into a window the flood has surely exhausted it
	// (0.1 s of a flood at ten times the limit, then two syncs until the
	// held shares are released, with room to spare): a sample read from
	// then to the window's end sees the window's whole count.
	fwSpent = 500 * time.Millisecond
	fwFlood = 7 * time.Second
	fwHosts = 3
	fwSync  = 100 * time.Millisecond
)

func fwPolicy(fleet string) string {
	return fleet + fmt.Sprintf(`rules:
  - name: %s
    match: {protocol: udp, dst_ports: [9]}
    limit: {algorithm: fixed_window, packets: %d, window: %v, scope: fleet}
`, ruleName, fwLimit, fwWindow)
}

// The bound the policy states (policy check, docs/design.md): the limit
// per window for the fleet once its live hosts are known, each host
// opening a window with the others' shares held until they report. Here
// every host has synced before the flood, so every window must admit the
// limit within ±5%. Measured: 1010-1014 then 1008 per window for 1000
// (simulated: 501 for 500, fleet/engine_test.go TestFleetFixedWindow);
// 1606-1726 before the engine held hosts that had reported part of their
// share at that share while the window is young. The same source on one
// host only gets the whole limit there: the others' shares are held for
// the window's first two syncs only.
func TestFleetFixedWindow(t *testing.T) {
	testutil.RequireRedis(t)
	l := fleetlab.NewLab(t, fwHosts)
	l.StartRedis(t, "")
	t.Run("three hosts", func(t *testing.T) { runFW(t, l, allHosts(l)) })
	t.Run("one host", func(t *testing.T) { runFW(t, l, []int{1}) })
}

// runFW starts a fresh fleet (new pins, a new Redis namespace), floods the
// hosts for fwFlood and checks the fleet's admissions per window.
func runFW(t *testing.T, l *fleetlab.Lab, hosts []int) {
	f := startFleet(t, l, fwPolicy(fleetYAML(fwSync.String(), false, redisURL(l))), fleetOptions{WaitUp: true})

	// Start the flood just after a window opens; sample 0.3 s before it
	// and 0.7 s into every window it covers.
	first := time.Now().Truncate(fwWindow).Add(fwWindow)
	time.Sleep(time.Until(first.Add(-fwWindow + fwSample)))
	nWin := int(fwFlood / fwWindow)
	samples := make([]fwSampleAt, 0, nWin+1)
	var sampleErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for k := range nWin + 1 {
			time.Sleep(time.Until(first.Add(time.Duration(k-1)*fwWindow + fwSample)))
			s := fwSampleAt{start: time.Now()}
			n, err := fleetPass(l)
			if err != nil {
				sampleErr = err
				return
			}
			s.pass, s.end = n, time.Now()
			samples = append(samples, s)
		}
	}()
	time.Sleep(time.Until(first.Add(10 * time.Millisecond)))
	res := floodSpread(t, l, spread{Hosts: hosts, Rate: floodRate, Dur: fwFlood})
	wg.Wait()
	t.Logf("flood: %d frames in %v from %s", res.Total, res.Elapsed.Round(time.Millisecond),
		first.Format("15:04:05.000"))
	if sampleErr != nil {
		t.Fatal(sampleErr)
	}

	per, judged := fwWindows(first, samples)
	t.Logf("admitted per window (limit %d): %v; judged %v", fwLimit, per, judged)
	n := 0
	for k, c := range per {
		if !judged[k] {
			continue
		}
		n++
		if ratio := float64(c) / fwLimit; math.Abs(ratio-1) > tolerance {
			t.Errorf("window %d: admitted %d (%.3f x the limit), want within ±%.0f%%", k+1, c, ratio, tolerance*100)
		}
	}
	// A sampler held back on a loaded machine reads a window late, when
	// the next one has opened: such a window is not judged, but the flood
	// lasts seven and at least half must be.
	if n < len(per)/2 {
		t.Errorf("only %d of %d windows sampled between %v into them and their end", n, len(per), fwSpent)
	}
	checkSynced(t, l, f, hosts)
}

// fwSampleAt is the fleet's pass count read between start and end.
type fwSampleAt struct {
	pass       uint64
	start, end time.Time
}

// fwWindows turns samples into admissions per window: sample k is read in
// the window that opens at first + (k-1) windows, and window k's count is
// the difference of samples k and k-1. A count is judged only when both
// samples were read wholly between fwSpent into their windows and the
// windows' ends, when nothing more is admitted in them.
func fwWindows(first time.Time, samples []fwSampleAt) (per []uint64, judged []bool) {
	onTime := func(k int) bool {
		open := first.Add(time.Duration(k-1) * fwWindow)
		s := samples[k]
		return !s.start.Before(open.Add(fwSpent)) && s.end.Before(open.Add(fwWindow))
	}
	for k := 1; k < len(samples); k++ {
		per = append(per, samples[k].pass-samples[k-1].pass)
		judged = append(judged, onTime(k-1) && onTime(k))
	}
	return per, judged
}

// A sample read late, in the next window, leaves both windows it bounds
// unjudged; samples on time judge theirs.
func TestFWWindowsJudgesOnlySamplesOnTime(t *testing.T) {
	first := time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)
	at := func(k int, off time.Duration, pass uint64) fwSampleAt {
		s := first.Add(time.Duration(k-1)*fwWindow + off)
		return fwSampleAt{pass: pass, start: s, end: s.Add(10 * time.Millisecond)}
	}
	samples := []fwSampleAt{at(0, fwSample, 0), at(1, fwSample, 1000), at(2, 1100*time.Millisecond, 2100), at(3, fwSample, 3000)}
	per, judged := fwWindows(first, samples)
	if fmt.Sprint(per) != "[1000 1100 900]" || fmt.Sprint(judged) != "[true false false]" {
		t.Errorf("per %v judged %v", per, judged)
	}
}

// fleetPass is the flood rule's pass count summed over the hosts.
func fleetPass(l *fleetlab.Lab) (uint64, error) {
	var sum uint64
	for i := range l.Hosts() {
		pass, _, err := readRule(l.Host(i), ruleName)
		if err != nil {
			return 0, err
		}
		sum += pass
	}
	return sum, nil
}
