// SPDX-License-Identifier: Apache-2.0

package fleet_test

import (
	"context"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

// A fleet fixed window opens holding the other hosts' shares, and a sync
// that hears they used nothing lowers its count: a refusal the per-CPU
// caches learned before that sync must not outlive it (bpf/refused.h, the
// ban epoch). One host floods past its share and is refused from the
// caches; the syncs release the others' unused shares; the host must then
// be admitted up to the whole fleet limit within the same window.
func TestFleetWindowCachedRefusalsEndAtSync(t *testing.T) {
	r, ns := startRedis(t)
	const limit = 300 // three hosts: a share of 100 each
	f, _ := newHosts(t, testutil.DialIn(ns), 3, fleetPolicy(r.Addr(),
		"{algorithm: fixed_window, packets: 300, window: 10s, scope: fleet}"))
	ctx := context.Background()
	meet(t, f)
	toWindowStart(t, f, 10*time.Second)
	// And to the start of an admission-sketch mark epoch (2^28 ns): a
	// cached refusal also ends with its mark epoch, which would hide a
	// missed one; everything below happens within this one.
	const mark = uint64(1) << 28
	f.Advance(time.Duration(mark - f.Now()%mark))
	epoch := f.Now() / mark

	testutil.PinCPU(t, 0) // the caches are per CPU
	h := f.Hosts[0]
	pkt := pktgen.UDP4(src, dst, 4000, 53, 16)
	send := func(n int) (admitted int) {
		t.Helper()
		for range n {
			ok, err := h.Send(pkt)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				admitted++
			}
		}
		return admitted
	}
	// Refusals from both caches, and from the flow cache alone.
	cached := func() (all, flow uint64) {
		t.Helper()
		cs, err := h.L.Counters()
		if err != nil {
			t.Fatal(err)
		}
		flow = cs[maps.CounterFlowCached].Packets
		return cs[maps.CounterRefusedCached].Packets + flow, flow
	}

	first := send(200) // its share, then refusals
	// From the second refusal on, the refused-until cache answers; from
	// the third, the flow cache (flows.h), which needs the generation to
	// read the ban epoch.
	if c, fc := cached(); c < 50 || fc < 50 {
		t.Fatalf("%d of 200 packets admitted, %d refused from the caches (%d by the flow cache): a fleet window's refusals should be cached", first, c, fc)
	}
	// The window's young part: the others' shares are held until they
	// have reported through syncs; then they are released (lowered).
	for _, d := range []time.Duration{10, 100, 100} {
		f.Advance(d * time.Millisecond)
		if err := f.SyncAll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if f.Now()/mark != epoch {
		t.Fatal("the test left the sketch's mark epoch it relies on")
	}
	before, _ := cached()
	second := send(400)
	after, _ := cached()
	t.Logf("admitted %d before the syncs, %d after (limit %d); cached refusals %d, then %d", first, second, limit, before, after)
	if first+second < limit-3 || first+second > limit+3 {
		t.Errorf("admitted %d in the window, want the fleet limit %d (the other hosts used nothing)", first+second, limit)
	}
	if after == before {
		t.Errorf("no refusal after the released shares came from the caches")
	}
}
