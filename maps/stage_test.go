// SPDX-License-Identifier: Apache-2.0

package maps_test

import (
	"testing"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/maps"
)

// TestBenchStop: the stage benchmark's program drops every packet after
// its stage and before the accounting: no verdict is counted in any cut,
// and only a cut after the rule's levels has charged the source (its state
// entry exists, and the levels' own counters moved); cut after the parser
// it is the parse-only program. A
// cut on the maps of a whole program sees what that program taught them:
// its refusals cost the cut nothing more than the whole program's.
func TestBenchStop(t *testing.T) {
	testutil.PinCPU(t, 0) // the flow cache is per CPU
	const policy = `
rules:
  - name: r
    limit: {algorithm: token_bucket, rate: 1/m, burst: 1}
`
	frame := udp4("192.0.2.1").MustBuild()
	for _, s := range maps.Stages {
		t.Run(s.String(), func(t *testing.T) {
			l := loadWith(t, maps.Options{Clock: maps.ClockMap, BenchStop: s}, policy)
			for range 3 {
				v, err := l.Program().Run(&ebpf.RunOptions{Data: frame, Repeat: 1})
				if err != nil {
					t.Fatal(err)
				}
				if v != xdpDrop {
					t.Fatalf("verdict %d, want XDP_DROP", v)
				}
			}
			checkCutAccounted(t, l, s)
		})
	}
	checkCutOnWholeMaps(t, policy, frame)
}

// checkCutAccounted: a cut after stage s accounted nothing, and only a cut
// after the rule's levels charged the source.
func checkCutAccounted(t *testing.T, l *maps.Limiter, s maps.Stage) {
	// The levels count their own events (a new source, a
	// refusal from the refused-until cache); the rest is the
	// accounting's.
	own := map[maps.Counter]bool{maps.CounterNewSource: s == maps.StopRule, maps.CounterRefusedCached: s == maps.StopRule}
	cs, err := l.Counters()
	if err != nil {
		t.Fatal(err)
	}
	for c, v := range cs {
		if v.Packets != 0 && !own[c] {
			t.Errorf("counter %s counted %d packets: the cut accounted", c, v.Packets)
		}
	}
	stats, err := l.RuleStats()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range stats {
		for v, c := range r.Verdicts {
			if c.Packets != 0 {
				t.Errorf("rule %s: verdict %d counted %d packets: the cut accounted", r.Name, v, c.Packets)
			}
		}
	}
	n, err := l.TrackedSources()
	if err != nil {
		t.Fatal(err)
	}
	if want := map[bool]int{true: 1, false: 0}[s == maps.StopRule]; n != want {
		t.Errorf("%d state entries after the cut, want %d", n, want)
	}
}

// checkCutOnWholeMaps: on the maps of the whole program, after its
// refusals taught the flow cache (admitted, refused, refused from the
// refused-until cache and noted, then refused by the flow cache), a cut
// after the flow cache is answered by it too (the stage counts its hit)
// and accounts nothing.
func checkCutOnWholeMaps(t *testing.T, policy string, frame []byte) {
	whole := loadWith(t, maps.Options{Clock: maps.ClockMap}, policy)
	for range 4 {
		if _, err := whole.Program().Run(&ebpf.RunOptions{Data: frame, Repeat: 1}); err != nil {
			t.Fatal(err)
		}
	}
	before, err := whole.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if got := before[maps.CounterFlowCached].Packets; got != 1 {
		t.Fatalf("the whole program's flow cache answered %d packets, want 1 (the fourth)", got)
	}
	cut, err := maps.Load(maps.Options{Clock: maps.ClockMap, BenchStop: maps.StopFlows, Pinned: whole.Maps()})
	if err != nil {
		t.Fatal(err)
	}
	defer cut.Close()
	if v, err := cut.Program().Run(&ebpf.RunOptions{Data: frame, Repeat: 1}); err != nil || v != xdpDrop {
		t.Fatalf("cut on the whole program's maps: verdict %d, %v; want XDP_DROP", v, err)
	}
	after, err := whole.Counters()
	if err != nil {
		t.Fatal(err)
	}
	for c, v := range after {
		want := before[c].Packets
		if c == maps.CounterFlowCached {
			want++
		}
		if v.Packets != want {
			t.Errorf("counter %s: %d after the cut's packet, want %d", c, v.Packets, want)
		}
	}
}
