// SPDX-License-Identifier: Apache-2.0

package maps_test

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/gen"
	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/maps"
)

// A burst of one: the sketch is off for the level, so every packet looks
// its key up, and each source's first packet inserts it.
const oneEach = `
rules:
  - name: each
    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}
`

func be32(addr string) uint32 {
	return binary.NativeEndian.Uint32(netip.MustParseAddr(addr).AsSlice())
}

// Two CPUs walk the same 4096 new sources at once, inserting into the
// sets both write: each source must get one entry whichever CPU meets it
// first, so that with the clock stopped each is admitted once in all
// (burst 1), not once per CPU. (The CPUs start microseconds apart, so the
// one behind mostly finds what the other made; two inserts of one key at
// the same instant, which the set's lock serialises, are rarely met here.)
func TestTable4RacingInserts(t *testing.T) {
	const n = 1 << 12
	base := netip.MustParseAddr("198.18.0.0")
	l := loadWith(t, maps.Options{Clock: maps.ClockMap, MaxSources: 1 << 18, BenchRotate: n, BenchBase: base}, oneEach)
	if err := l.SetClock(uint64(t0)); err != nil {
		t.Fatal(err)
	}
	frame := udp4("198.18.0.0").MustBuild()
	if err := onBothCPUs(func(int) error {
		_, err := l.Program().Run(&ebpf.RunOptions{Data: frame, Repeat: n})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	stats, err := l.RuleStats()
	if err != nil {
		t.Fatal(err)
	}
	pass, drop := stats[0].Verdicts[maps.VerdictPass].Packets, stats[0].Verdicts[maps.VerdictDrop].Packets
	if pass != n || drop != n {
		t.Errorf("%d passed, %d dropped of %d sources sent by both CPUs: want each admitted once", pass, drop, n)
	}
	if c := counter(t, l, maps.CounterNewSource); c != n {
		t.Errorf("%d entries created for %d sources", c, n)
	}
	seen := map[uint32]int{}
	if err := l.WalkIPv4States(func(_, addr uint32, _ gen.XdplimitXdplState) { seen[addr]++ }); err != nil {
		t.Fatal(err)
	}
	for addr, k := range seen {
		if k != 1 {
			t.Errorf("source %08x has %d entries", addr, k)
		}
	}
	if len(seen) != n {
		t.Errorf("%d sources in the table, want %d", len(seen), n)
	}
}

// A set full of keys gives a new key the way of the one used in the fewest
// ticks, the least recently used among those: the second of four (none
// used since its insert), as the first was used again since; and then,
// while one-packet sources follow, each of them in turn, never the source
// that sent again, though it is the least recently used.
func TestTable4EvictsLeastUsed(t *testing.T) {
	l := loadWith(t, maps.Options{Clock: maps.ClockMap, MaxSources: 64}, oneEach)
	id := stateID(t, l)
	// Eight sources of one set.
	var same []string
	want := uint32(0)
	for i := 1; len(same) < 8; i++ {
		a := fmt.Sprintf("192.0.%d.%d", i/250, i%250+1)
		if s := l.Set4Of(id, be32(a)); len(same) == 0 || s == want {
			want = s
			same = append(same, a)
		}
	}
	// The stamps count jiffies: a few ticks apart, the uses are ordered.
	tick := func() { time.Sleep(12 * time.Millisecond) }
	for _, a := range same[:4] {
		if v := xdpltest.Run(t, l, udp4(a).MustBuild(), t0); v != xdpPass {
			t.Fatalf("%s's first packet: %d", a, v)
		}
		tick()
	}
	// Used again (refused: its burst is spent), the first is now the
	// most recently used.
	if v := xdpltest.Run(t, l, udp4(same[0]).MustBuild(), t0); v != xdpDrop {
		t.Fatalf("%s's second packet: %d", same[0], v)
	}
	tick()
	if v := xdpltest.Run(t, l, udp4(same[4]).MustBuild(), t0); v != xdpPass {
		t.Fatalf("%s's first packet: %d", same[4], v)
	}
	for i, a := range same[:5] {
		_, ok, err := maps.LookupIPv4State(l, id, be32(a))
		if err != nil {
			t.Fatal(err)
		}
		if ok != (i != 1) {
			t.Errorf("%s (inserted %d of 5) in the table: %v", a, i+1, ok)
		}
	}
	// The evicted source starts afresh: its burst again. It evicts the
	// third (the oldest of those used once), and the next two the fourth
	// and fifth.
	for _, a := range append([]string{same[1]}, same[5:7]...) {
		tick()
		if v := xdpltest.Run(t, l, udp4(a).MustBuild(), t0); v != xdpPass {
			t.Errorf("%s, a new entry: %d, want its pass", a, v)
		}
	}
	for i, a := range same[:7] {
		_, ok, err := maps.LookupIPv4State(l, id, be32(a))
		if err != nil {
			t.Fatal(err)
		}
		if in := i < 2 || i > 4; ok != in {
			t.Errorf("after three more one-packet sources, %s in the table: %v, want %v", a, ok, in)
		}
	}
}

// A limiter loaded onto another's maps (a restart that adopts the pins)
// hashes with the table's seed, kept in the metadata: it finds the keys
// the first one made, and its program refuses a source the first one
// charged.
func TestTable4SeedKeptWithTheTable(t *testing.T) {
	first := loadWith(t, maps.Options{Clock: maps.ClockMap}, oneEach)
	if v := xdpltest.Run(t, first, udp4("192.0.2.9").MustBuild(), t0); v != xdpPass {
		t.Fatalf("first packet: %d", v)
	}
	pinned := map[string]*ebpf.Map{}
	for _, name := range maps.MapNames {
		if m := first.Map(name); m != nil {
			pinned[name] = m
		}
	}
	second, err := maps.Load(maps.Options{Clock: maps.ClockMap, Pinned: pinned})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if second.Table4Seed() != first.Table4Seed() {
		t.Fatalf("seed %x after the restart, %x before", second.Table4Seed(), first.Table4Seed())
	}
	if _, ok, err := maps.LookupIPv4State(second, stateID(t, first), be32("192.0.2.9")); err != nil || !ok {
		t.Fatalf("the source's entry after the restart: %v, %v", ok, err)
	}
	if v := xdpltest.Run(t, second, udp4("192.0.2.9").MustBuild(), t0); v != xdpDrop {
		t.Errorf("second packet, through the new program: %d, want its burst spent", v)
	}
}

// stateID is the state id of the only level of l's policy: the last one
// the policy's apply handed out.
func stateID(t *testing.T, l *maps.Limiter) uint32 {
	t.Helper()
	m, err := l.Meta()
	if err != nil {
		t.Fatal(err)
	}
	return m.NextStateID - 1
}
