// SPDX-License-Identifier: Apache-2.0

package maps_test

import (
	"testing"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/model"
)

// TestBenchFloor: each floor program decides as its name says on the real
// kernel. A key's first packet teaches the state and passes; then a known
// source is refused (and another source, new, passes first), a global
// level refuses every source, an admitted source passes with one state
// entry, and an inserted one too, its insert counted once. The window
// floors admit as the token bucket's does, and their entry of the source
// counts the packets after the first (the window's count in its low 40
// bits: in a for the fixed window, in one of a and b for the sliding). Each
// verdict is counted as the policy's one rule's, nothing else.
func TestBenchFloor(t *testing.T) {
	const policy = `
rules:
  - name: r
    limit: {algorithm: token_bucket, rate: 1/m, burst: 1}
`
	a, b := udp4("192.0.2.1").MustBuild(), udp4("192.0.2.2").MustBuild()
	for _, c := range []struct {
		floor      maps.Floor
		want       []uint32 // verdicts of a, a, a, b, b
		tracked    int
		pass, drop uint64
	}{
		{maps.FloorRefused, []uint32{xdpPass, xdpDrop, xdpDrop, xdpPass, xdpDrop}, 0, 2, 3},
		{maps.FloorGlobal, []uint32{xdpPass, xdpDrop, xdpDrop, xdpDrop, xdpDrop}, 0, 1, 4},
		{maps.FloorAdmitted, []uint32{xdpPass, xdpPass, xdpPass, xdpPass, xdpPass}, 2, 5, 0},
		{maps.FloorInserted, []uint32{xdpPass, xdpPass, xdpPass, xdpPass, xdpPass}, 2, 5, 0},
		{maps.FloorUntracked, []uint32{xdpPass, xdpPass, xdpPass, xdpPass, xdpPass}, 0, 5, 0},
		{maps.FloorAdmittedFW, []uint32{xdpPass, xdpPass, xdpPass, xdpPass, xdpPass}, 2, 5, 0},
		{maps.FloorAdmittedSW, []uint32{xdpPass, xdpPass, xdpPass, xdpPass, xdpPass}, 2, 5, 0},
	} {
		t.Run(c.floor.String(), func(t *testing.T) {
			// The refused floor's slot is per CPU; a subtest runs on a
			// goroutine of its own, which the parent's pin does not hold.
			testutil.PinCPU(t, 0)
			l := loadWith(t, maps.Options{Clock: maps.ClockCoarse, BenchFloor: c.floor}, policy)
			for i, f := range [][]byte{a, a, a, b, b} {
				v, err := l.Program().Run(&ebpf.RunOptions{Data: f, Repeat: 1})
				if err != nil {
					t.Fatal(err)
				}
				if v != c.want[i] {
					t.Errorf("packet %d: verdict %d, want %d", i, v, c.want[i])
				}
			}
			stats, err := l.RuleStats()
			if err != nil {
				t.Fatal(err)
			}
			if len(stats) != 1 {
				t.Fatalf("%d rules in force, want 1", len(stats))
			}
			got := stats[0].Verdicts
			if got[maps.VerdictPass].Packets != c.pass || got[maps.VerdictDrop].Packets != c.drop {
				t.Errorf("counted %d passed and %d dropped, want %d and %d",
					got[maps.VerdictPass].Packets, got[maps.VerdictDrop].Packets, c.pass, c.drop)
			}
			if want := uint64(len(a)) * c.drop; got[maps.VerdictDrop].Bytes != want {
				t.Errorf("counted %d bytes dropped, want %d", got[maps.VerdictDrop].Bytes, want)
			}
			if n, err := l.TrackedSources(); err != nil || n != c.tracked {
				t.Errorf("%d state entries (%v), want %d", n, err, c.tracked)
			}
			if c.floor == maps.FloorInserted {
				if n := counter(t, l, maps.CounterNewSource); n != 2 {
					t.Errorf("%d inserts counted, want 2", n)
				}
			}
			if c.floor == maps.FloorAdmittedFW || c.floor == maps.FloorAdmittedSW {
				st, ok, err := maps.LookupIPv4State(l, 1, be32("192.0.2.1"))
				if err != nil || !ok {
					t.Fatalf("no entry of the first source (%v)", err)
				}
				const count = model.MaxWindowCount // a window word's count bits
				if n := st.A&count + st.B&count; c.floor == maps.FloorAdmittedSW && n != 2 ||
					c.floor == maps.FloorAdmittedFW && st.A != 2 {
					t.Errorf("entry %#x %#x, want a count of 2", st.A, st.B)
				}
			}
			if c.floor == maps.FloorUntracked {
				if n, err := l.SketchCount(); err != nil || n != 5 {
					t.Errorf("the sketch's cells add up to %d (%v), want 5", n, err)
				}
			}
		})
	}
	// A floor runs instead of the stages, after the parser: asking for it
	// with a stop or the parser alone is refused at load.
	for _, o := range []maps.Options{
		{BenchFloor: maps.FloorRefused, BenchStop: maps.StopFlows},
		{BenchFloor: maps.FloorRefused, BenchParseOnly: true},
	} {
		if l, err := maps.Load(o); err == nil {
			l.Close()
			t.Errorf("loaded with %+v, want an error", o)
		}
	}
}
