// SPDX-License-Identifier: Apache-2.0

package fleet_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/gen"
	"github.com/xdplimit/xdplimit/internal/harness/fleetsim"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/pktgen"
)

// Real hosts sync at independent phases, so a host may report in the
// middle of a burst, part of its share. The others must still hold it at
// its share while the window is young, or they take the rest of its share
// while it admits that rest too. Found end to end (test/fleet
// TestFleetFixedWindow: 1.6-1.7x the limit per window); the simulation of
// engine_test.go syncs every host at one instant after the same traffic,
// so it never reports part of a burst.
func TestFleetFixedWindowPartialReport(t *testing.T) {
	r, ns := startRedis(t)
	const limit = 300 // three hosts: a share of 100 each
	f, _ := newHosts(t, testutil.DialIn(ns), 3, fleetPolicy(r.Addr(),
		"{algorithm: fixed_window, packets: 300, window: 1s, scope: fleet}"))
	w := newWindowFleet(t, f)
	meet(t, f)
	toWindowStart(t, f, time.Second)

	// All within the window's first two syncs (its young part).
	w.send(0, 50) // host 0 reports in the middle of its burst
	w.sync(0)
	f.Advance(10 * time.Millisecond)
	w.send(1, 200) // host 1 spends its share and hears of host 0's 50
	w.sync(1)
	f.Advance(10 * time.Millisecond)
	w.send(1, 200) // nothing left for host 1
	w.send(0, 200) // host 0 spends the rest of its share
	w.send(2, 200) // host 2 its share
	w.check(limit)
}

// Syncs stretched past their interval (a loaded host: ticks dropped while
// a sync runs long or the process waits for a CPU) must not shorten the
// window's young part: the others' shares are held for two of the host's
// syncs as they happen, not two configured intervals. Held for 200 ms
// while the hosts synced every 200-250 ms, host 1 heard host 0's partial
// report after the young part and took the rest of host 0's share, which
// host 0 then admitted too (end to end: 1.134x the limit in a window, the
// hosts 70, 93 and 116 syncs into a flood that allowed about 100).
func TestFleetFixedWindowStretchedSyncs(t *testing.T) {
	r, ns := startRedis(t)
	const limit = 300 // three hosts: a share of 100 each
	f, _ := newHosts(t, testutil.DialIn(ns), 3, fleetPolicy(r.Addr(),
		"{algorithm: fixed_window, packets: 300, window: 1s, scope: fleet}"))
	w := newWindowFleet(t, f)
	const every = 200 * time.Millisecond // the hosts' syncs, at sync: 100ms
	for range 3 {
		if err := f.SyncAll(w.ctx); err != nil {
			t.Fatal(err)
		}
		f.Advance(every)
	}
	toWindowStart(t, f, time.Second)
	w.send(0, 50) // host 0 reports in the middle of its burst
	w.sync(0)
	f.Advance(every + every/4) // host 1's next sync, a little late
	w.send(1, 200)
	w.sync(1)
	w.send(1, 200)
	w.send(0, 200) // host 0 spends the rest of its share
	w.send(2, 200) // host 2 its share
	w.check(limit)
}

// windowFleet sends one source's packets to the hosts of a simulated fleet
// one at a time, counting what each admits, and syncs them one at a time.
type windowFleet struct {
	t        *testing.T
	f        *fleetsim.Fleet
	ctx      context.Context
	pkt      []byte
	admitted []int
	epochs   []map[uint64]bool // per host: the sketch's count epochs it sent in
}

func newWindowFleet(t *testing.T, f *fleetsim.Fleet) *windowFleet {
	return &windowFleet{t: t, f: f, ctx: context.Background(),
		pkt: pktgen.UDP4(src, dst, 4000, 53, 16), admitted: make([]int, len(f.Hosts)),
		epochs: make([]map[uint64]bool, len(f.Hosts))}
}

// send sends n packets to host i.
func (w *windowFleet) send(i, n int) {
	w.t.Helper()
	if w.epochs[i] == nil {
		w.epochs[i] = map[uint64]bool{}
	}
	w.epochs[i][w.f.Now()>>gen.XdplimitXdplConstXDPL_SKETCH_EPOCH_SHIFT] = true
	for range n {
		ok, err := w.f.Hosts[i].Send(w.pkt)
		if err != nil {
			w.t.Fatal(err)
		}
		if ok {
			w.admitted[i]++
		}
	}
}

// sync runs host i's sync.
func (w *windowFleet) sync(i int) {
	w.t.Helper()
	if res := w.f.Hosts[i].E.Sync(w.ctx); res.Err != nil {
		w.t.Fatalf("host %d: sync: %v", i, res.Err)
	}
}

// check requires the fleet to have admitted at most limit in the window.
// The admission sketch's untracked packets (see TestFleetFixedWindow),
// which no share counts: a host admits a key's first packet on a CPU
// before it has an entry (track_after 2), once per CPU and per count epoch
// of the sketch in which that CPU has not yet seen the key twice. The
// sends span two count epochs (16.8 ms) or three, so a host that sent in
// two of them may admit two such packets on one CPU: seen once, 307 with
// host 0 at 103 (usually [101 102 101]).
func (w *windowFleet) check(limit int) {
	w.t.Helper()
	total := sum(w.admitted)
	slack := 0
	for _, e := range w.epochs {
		slack += len(e) * runtime.NumCPU()
	}
	w.t.Logf("admitted per host %v, %d in all (limit %d, %d untracked at most)", w.admitted, total, limit, slack)
	if total > limit+slack {
		w.t.Errorf("the fleet admitted %d in one window, limit %d (+%d untracked first packets)", total, limit, slack)
	}
}
