// SPDX-License-Identifier: Apache-2.0

package fleet_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/harness/fleetsim"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/pktgen"
	"github.com/xdplimit/xdplimit/policy"
)

// newHosts starts a simulated fleet of n hosts running yaml
// (internal/testkit/fleetsim.Fleet: the real program with an injected clock, and the
// real engine), closed when the test ends.
func newHosts(t *testing.T, dial func(context.Context, string, string) (net.Conn, error), n int, yaml string) (*fleetsim.Fleet, *policy.Policy) {
	t.Helper()
	testutil.RequireRoot(t)
	f, err := fleetsim.New(fleetsim.Config{Hosts: n, Policy: yaml, Dial: dial, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, f.Policy
}

// simulate floods for dur: every simulated millisecond each sender host
// gets perMs packets of pkt, and every sync each host syncs. It returns the
// packets admitted by each host.
func simulate(t *testing.T, f *fleetsim.Fleet, senders []int, pkt []byte, perMs int, dur, sync time.Duration) []int {
	t.Helper()
	admitted, err := f.Run(context.Background(), fleetsim.Flood{Senders: senders, Packet: pkt,
		PerMs: perMs * len(senders), Duration: dur, Sync: sync})
	if err != nil {
		t.Fatal(err)
	}
	return admitted
}

func sum(v []int) int { return fleetsim.Sum(v) }

// meet syncs every host twice, 100 ms apart: every host then knows how
// many hosts the fleet has (the reserves of fixed windows).
func meet(t *testing.T, f *fleetsim.Fleet) {
	t.Helper()
	for range 2 {
		if err := f.SyncAll(context.Background()); err != nil {
			t.Fatal(err)
		}
		f.Advance(100 * time.Millisecond)
	}
}

// toWindowStart advances the fleet's clock to the next boundary of the
// datapath's windows of length w, for a policy of one fleet level.
func toWindowStart(t *testing.T, f *fleetsim.Fleet, w time.Duration) {
	t.Helper()
	fls, err := f.Hosts[0].L.FleetLevels()
	if err != nil || len(fls) != 1 {
		t.Fatalf("fleet levels: %v %v", fls, err)
	}
	f.Advance(time.Duration(uint64(w) - (f.Now()+fls[0].P3)%uint64(w)))
}

func within(t *testing.T, what string, got int, want float64, tol float64) {
	t.Helper()
	ratio := float64(got) / want
	t.Logf("%s: admitted %d, fleet limit %.0f (ratio %.3f)", what, got, want, ratio)
	if ratio < 1-tol || ratio > 1+tol {
		t.Errorf("%s: admitted %d, want %.0f within ±%.0f%%", what, got, want, tol*100)
	}
}

func fleetPolicy(addr, limit string) string {
	return fmt.Sprintf(`
fleet:
  redis: redis://%s/0
  namespace: t%d
  sync: 100ms
rules:
  - name: dns
    match: {protocol: udp, dst_ports: [53]}
    limit: %s
`, addr, time.Now().UnixNano(), limit)
}

var (
	src = netip.MustParseAddr("198.51.100.7")
	dst = netip.MustParseAddr("192.0.2.1")
)

// Three hosts, one source flooding all three at 9x the fleet limit: the
// fleet admits burst + rate x t (within 5%), not three times it; and the
// same source on one host only gets the whole fleet limit there.
//
// Not in the VM: there the simulated clock runs ten times slower than the
// real one (5 simulated seconds take 50), and Redis expires an idle key
// (its debt plus a second) in real time, so a key can expire between two
// syncs of one simulated 100 ms and the fleet start afresh.
func TestFleetTokenBucket(t *testing.T) {
	testutil.HostOnly(t, "the simulation's clock runs slower than the real time in which Redis expires keys")
	r, ns := startRedis(t)
	for _, tc := range []struct {
		name    string
		limit   string
		senders []int
	}{
		{"per-source, three hosts", "{algorithm: token_bucket, rate: 1000/s, burst: 200, scope: fleet}", []int{0, 1, 2}},
		{"per-source, one host", "{algorithm: token_bucket, rate: 1000/s, burst: 200, scope: fleet}", []int{1}},
		{"global, three hosts", "{algorithm: token_bucket, rate: 1000/s, burst: 200, scope: fleet}\n    key: global", []int{0, 1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hosts, _ := newHosts(t, testutil.DialIn(ns), 3, fleetPolicy(r.Addr(), tc.limit))
			pkt := pktgen.UDP4(src, dst, 4000, 53, 16)
			perMs := 9 / len(tc.senders)
			got := simulate(t, hosts, tc.senders, pkt, perMs, 5*time.Second, 100*time.Millisecond)
			within(t, tc.name, sum(got), 200+1000*5, 0.05)
		})
	}
}

// startRedis starts a redis-server on the loopback of a namespace of the
// test's own.
func startRedis(t *testing.T) (*testutil.RedisServer, *testutil.Netns) {
	testutil.RequireRoot(t)
	ns := testutil.NewNetns(t)
	return testutil.StartRedis(t, ns, testutil.RedisConfig{Addr: netip.MustParseAddrPort("127.0.0.1:6379")}), ns
}

// Fixed windows: three hosts flooding at 9x, and one host alone. Each
// window is simulated on its own so that its admissions can be counted.
// The first window opens before any host knows how many hosts the fleet has
// (no reserve yet); from the second on, the fleet admits the limit (the
// shares held for hosts that have not reported yet, released after two
// syncs), and a host alone gets the whole limit. The 1% allowed above the
// limit is the admission sketch's: a key's first packet on a CPU whose
// sketch has not seen it passes untracked (docs/design.md), and the test
// goroutine may move between CPUs.
func TestFleetFixedWindow(t *testing.T) {
	r, ns := startRedis(t)
	const limit, window = 500, time.Second
	for _, tc := range []struct {
		senders  []int
		min, max float64 // admitted per window after the first, / limit
	}{{[]int{0, 1, 2}, 0.95, 1.05}, {[]int{1}, 0.95, 1.01}} {
		t.Run(fmt.Sprintf("%d hosts sending", len(tc.senders)), func(t *testing.T) {
			hosts, _ := newHosts(t, testutil.DialIn(ns), 3, fleetPolicy(r.Addr(),
				fmt.Sprintf("{algorithm: fixed_window, packets: %d, window: %v, scope: fleet}", limit, window)))
			toWindowStart(t, hosts, window)
			pkt := pktgen.UDP4(src, dst, 4000, 53, 16)
			var per []int
			for range 5 {
				per = append(per, sum(simulate(t, hosts, tc.senders, pkt, 9/len(tc.senders), window, 100*time.Millisecond)))
			}
			t.Logf("admitted per window (limit %d): %v", limit, per)
			for i, n := range per[1:] {
				if f := float64(n) / limit; f < tc.min || f > tc.max {
					t.Errorf("window %d: admitted %d, want %.2f..%.2f x %d", i+2, n, tc.min, tc.max, limit)
				}
			}
		})
	}
}
