package fleet

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/fleetlab"
	"github.com/xdplimit/xdplimit/internal/testutil"
)

// Fixed windows at fleet scope: the windows of every host are aligned to
// the wall clock (whole seconds here), so the fleet's admissions per window
// are read by sampling every host's pass counter once per window, late in
// it (at 0.8 s), when the flood at ten times the limit has long exhausted
// it (and the shares held for hosts that had not reported are released
// two syncs after the window opened).
const (
	fwLimit  = tbRate // packets per window
	fwWindow = time.Second
	fwSample = 800 * time.Millisecond // into each window
	fwFlood  = 7 * time.Second
	fwHosts  = 3
	fwSync   = 100 * time.Millisecond
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

	// Start the flood just after a window opens; sample 0.2 s before it
	// and 0.8 s into every window it covers.
	first := time.Now().Truncate(fwWindow).Add(fwWindow)
	time.Sleep(time.Until(first.Add(-fwWindow + fwSample)))
	nWin := int(fwFlood / fwWindow)
	samples := make([]uint64, 0, nWin+1)
	var sampleErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for k := range nWin + 1 {
			time.Sleep(time.Until(first.Add(time.Duration(k-1)*fwWindow + fwSample)))
			n, err := fleetPass(l)
			if err != nil {
				sampleErr = err
				return
			}
			samples = append(samples, n)
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

	var per []uint64
	for k := 1; k < len(samples); k++ {
		per = append(per, samples[k]-samples[k-1])
	}
	t.Logf("admitted per window (limit %d): %v", fwLimit, per)
	for k, n := range per {
		if ratio := float64(n) / fwLimit; math.Abs(ratio-1) > tolerance {
			t.Errorf("window %d: admitted %d (%.3f x the limit), want within ±%.0f%%", k+1, n, ratio, tolerance*100)
		}
	}
	checkSynced(t, l, f, hosts)
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
