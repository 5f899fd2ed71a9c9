// SPDX-License-Identifier: Apache-2.0

package maps_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/gen"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/maps"
)

// The benchmark rotation makes every re-run of one buffer a new source: with
// the sketch none of them costs an insert; without it every one does.
func TestBenchRotation(t *testing.T) {
	for _, c := range []struct {
		trackAfter         uint32
		inserts, untracked uint64
	}{{0, 0, 1 << 10}, {1, 1 << 10, 0}} {
		l := loadWith(t, maps.Options{Clock: maps.ClockMap, TrackAfter: c.trackAfter, BenchRotate: 1 << 10,
			BenchBase: netip.MustParseAddr("10.0.0.0")}, `
rules:
  - name: r
    limit: {algorithm: token_bucket, rate: 1000/s, burst: 1}
`)
		if _, err := l.Program().Run(&ebpf.RunOptions{Data: udp4("10.0.0.0").MustBuild(), Repeat: 1 << 10}); err != nil {
			t.Fatal(err)
		}
		cs, err := l.Counters()
		if err != nil {
			t.Fatal(err)
		}
		stats, err := l.RuleStats()
		if err != nil {
			t.Fatal(err)
		}
		// Count-min collisions track a few sources early: a handful of
		// inserts among 1024 one-packet sources, never fewer untracked.
		if cs[maps.CounterNewSource].Packets+cs[maps.CounterUntracked].Packets != 1<<10 ||
			cs[maps.CounterNewSource].Packets > c.inserts+(1<<10)/8 || cs[maps.CounterNewSource].Packets < c.inserts ||
			stats[0].Verdicts[maps.VerdictPass].Packets != 1<<10 {
			t.Errorf("track after %d: %d inserts, %d untracked, %d passed over 1024 distinct sources, want %d, %d, 1024",
				c.trackAfter, cs[maps.CounterNewSource].Packets, cs[maps.CounterUntracked].Packets,
				stats[0].Verdicts[maps.VerdictPass].Packets, c.inserts, c.untracked)
		}
	}
}

// TestSketchMarks: the sketch sends a key to the state table only while its
// cells are marked, which a hit does and an insert does not. A tracked
// source that keeps sending is charged for every packet; after a pause of
// over a mark epoch its first packet is counted in the sketch like a new
// key's and passes uncharged (the bound design.md states), and its second
// finds its entry again instead of inserting a fresh one. Both the
// single-level path and the two-phase one (with an aggregate) are covered.
func TestSketchMarks(t *testing.T) {
	const mark = time.Duration(1) << gen.XdplimitXdplConstXDPL_SKETCH_MARK_SHIFT
	base := 40 * mark // the start of a mark epoch and of a count epoch
	for _, c := range []struct{ name, rule string }{
		{"single level", ""},
		{"with an aggregate", "    aggregate:\n      - key: global\n        limit: {algorithm: token_bucket, rate: 1000000/s, burst: 1000000}\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			testutil.PinCPU(t, 0) // the sketch is per CPU; a subtest has its own thread
			l := loadWith(t, maps.Options{Clock: maps.ClockMap}, `
rules:
  - name: r
    limit: {algorithm: token_bucket, rate: 1000/s, burst: 10}
`+c.rule)
			pkt := udp4("192.0.2.9").MustBuild()
			burst := func(at time.Duration, n int) string {
				var v []uint32
				for i := 0; i < n; i++ {
					v = append(v, xdpltest.Run(t, l, pkt, at))
				}
				return letters(v)
			}
			for _, step := range []struct {
				what              string
				at                time.Duration
				n                 int
				want              string
				untracked, insert uint64
			}{
				// First packet untracked, the second inserts, then the
				// bucket (burst 10) decides.
				{"new source", base, 20, "PPPPPPPPPPPDDDDDDDDD", 1, 1},
				// 100 ms later, same mark epoch: refilled to its burst,
				// every packet charged.
				{"same mark epoch", base + 100*time.Millisecond, 20, "PPPPPPPPPPDDDDDDDDDD", 1, 1},
				// In the next mark epoch the marks from the last still
				// count.
				{"next mark epoch", base + mark + 100*time.Millisecond, 20, "PPPPPPPPPPDDDDDDDDDD", 1, 1},
				// Two mark epochs of silence: the marks lapsed. One
				// packet passes uncharged; the second finds the entry
				// (no new insert), whose bucket decides again.
				{"after a pause", base + 3*mark + 50*time.Millisecond, 20, "PPPPPPPPPPPDDDDDDDDD", 2, 1},
				{"marked again", base + 3*mark + 50*time.Millisecond, 5, "DDDDD", 2, 1},
			} {
				if got := burst(step.at, step.n); got != step.want {
					t.Errorf("%s: %s, want %s", step.what, got, step.want)
				}
				cs, err := l.Counters()
				if err != nil {
					t.Fatal(err)
				}
				if u, n := cs[maps.CounterUntracked].Packets, cs[maps.CounterNewSource].Packets; u != step.untracked ||
					n != step.insert {
					t.Errorf("%s: %d untracked, %d inserts, want %d and %d",
						step.what, u, n, step.untracked, step.insert)
				}
			}
		})
	}
}

// TestHeavySourceAmongSpoofed: one source flooding at 10x its limit hidden
// among a million one-packet spoofed sources (a thousand times the table's
// capacity), plus
// legitimate low-rate sources. The heavy source stays limited within 5% (it
// is never evicted into a fresh bucket), the table never exceeds its
// capacity, and no legitimate packet is dropped.
func TestHeavySourceAmongSpoofed(t *testing.T) {
	const capacity = 1024
	l := loadWith(t, maps.Options{Clock: maps.ClockMap, MaxSources: capacity}, `
rules:
  - name: r
    limit: {algorithm: token_bucket, rate: 1000/s, burst: 50}
`)
	testutil.PinCPU(t, 0) // the sketch is per CPU
	heavy := udp4("192.0.2.1").MustBuild()
	legit := make([][]byte, 10)
	for i := range legit {
		legit[i] = udp4(fmt.Sprintf("198.18.1.%d", i+1)).MustBuild()
	}
	r := rand.New(rand.NewPCG(1, 2))
	const (
		step     = 100 * time.Microsecond // heavy: 10k/s, 10x its limit
		duration = 2 * time.Second
	)
	spoofPerStep := 50
	if testutil.InVM() {
		spoofPerStep = 5
	}
	var heavyPass, legitDrop, spoofed int
	for now := t0; now < t0+duration; now += step {
		if xdpltest.Run(t, l, heavy, now) == xdpPass {
			heavyPass++
		}
		// A million one-packet sources over the run (100k under
		// emulation), at least 100x the table's capacity.
		for k := 0; k < spoofPerStep; k++ {
			a := r.Uint32()
			f := udp4(netip.AddrFrom4([4]byte{byte(a>>24) | 1, byte(a >> 16), byte(a >> 8), byte(a)}).String())
			xdpltest.Run(t, l, f.MustBuild(), now)
			spoofed++
		}
		// Legitimate sources: 100/s each, well within their limit.
		if (now-t0)%(10*time.Millisecond) == 0 {
			for _, p := range legit {
				if xdpltest.Run(t, l, p, now) != xdpPass {
					legitDrop++
				}
			}
		}
	}
	want := 50 + 1000*duration.Seconds()
	t.Logf("heavy passed %d (expected %.0f), %d spoofed sources, legit drops %d", heavyPass, want, spoofed, legitDrop)
	if spoofed < 10*capacity {
		t.Fatalf("only %d spoofed sources", spoofed)
	}
	if r := float64(heavyPass) / want; r < 0.95 || r > 1.05 {
		t.Errorf("heavy source admitted %d, want %.0f within 5%%", heavyPass, want)
	}
	if legitDrop != 0 {
		t.Errorf("%d legitimate packets dropped", legitDrop)
	}
	n, err := l.TrackedSources()
	if err != nil {
		t.Fatal(err)
	}
	cs, err := l.Counters()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("table holds %d of %d; %d inserts, %d admitted untracked, %d insert failures", n, capacity,
		cs[maps.CounterNewSource].Packets, cs[maps.CounterUntracked].Packets, cs[maps.CounterInsertFail].Packets)
	if n > capacity {
		t.Errorf("the table holds %d entries, its capacity is %d", n, capacity)
	}
}

// A sketch cell counts to 255: a larger threshold would never be reached,
// and every key would pass untracked.
func TestTrackAfterBound(t *testing.T) {
	testutil.RequireRoot(t)
	_, err := maps.Load(maps.Options{TrackAfter: maps.MaxTrackAfter + 1})
	if err == nil || !strings.Contains(err.Error(), "counts up to 255") {
		t.Fatalf("track after %d: %v, want a refusal", maps.MaxTrackAfter+1, err)
	}
}
