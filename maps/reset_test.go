// SPDX-License-Identifier: Apache-2.0

package maps_test

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/gen"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/maps"
)

// resetPolicy has a level of each kind of state a trace fills: per-source
// token bucket, fixed window and sliding log (small limits: tracked from
// their first packet), one whose sources the admission sketch counts, and
// a deny list.
const resetPolicy = `
deny: [192.0.2.99/32]
rules:
  - name: tb
    match: {protocol: udp, dst_ports: [53]}
    limit: {algorithm: token_bucket, rate: 2/s, burst: 2}
  - name: fw
    match: {protocol: udp, dst_ports: [54]}
    limit: {algorithm: fixed_window, packets: 3, window: 1s}
  - name: log
    match: {protocol: udp, dst_ports: [55]}
    limit: {algorithm: sliding_log, packets: 2, window: 1s}
  - name: sketched
    match: {protocol: udp, dst_ports: [56]}
    limit: {algorithm: token_bucket, rate: 1000/s, burst: 1000}
`

// resetTrace runs a trace over every level and a ban on l, and returns its
// verdicts.
func resetTrace(t *testing.T, l *maps.Limiter) string {
	t.Helper()
	if _, err := l.Ban(netip.MustParsePrefix("198.51.100.0/24"), time.Hour, "test"); err != nil {
		t.Fatal(err)
	}
	var v []uint32
	for i := 0; i < 600; i++ {
		f := udp4(fmt.Sprintf("10.1.%d.%d", i%7, i%31))
		f.DstPort = uint16(53 + i%4)
		switch i % 50 {
		case 0:
			f.Src = netip.MustParseAddr("192.0.2.99")
		case 1:
			f.Src = netip.MustParseAddr("198.51.100.7")
		}
		v = append(v, xdpltest.Run(t, l, f.MustBuild(), t0+time.Duration(i)*time.Millisecond))
	}
	return letters(v)
}

// TestResetIsNew: a limiter reset after a trace holds what a new one holds,
// and runs the same trace to the same verdicts and counters. Tests share
// one loaded program per build through Reset (xdpltest), so any state it
// missed would leak from one test into the next.
func TestResetIsNew(t *testing.T) {
	xdpltest.RequireBPF(t)
	// The refused-until cache is per CPU: both traces must run on one, or
	// its counts differ by where the scheduler put the thread.
	testutil.PinCPU(t, 0)
	opts := maps.Options{Clock: maps.ClockMap, MaxSources: 1 << 12, SampleOneIn: 1}
	fresh, err := maps.Load(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	used, err := maps.Load(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer used.Close()
	img := xdpltest.Compile(t, resetPolicy)
	if err := used.Apply(img); err != nil {
		t.Fatal(err)
	}
	first := resetTrace(t, used)
	if err := used.Reset(); err != nil {
		t.Fatal(err)
	}
	requireNew(t, used, fresh)

	for _, l := range []*maps.Limiter{fresh, used} {
		if err := l.Apply(img); err != nil {
			t.Fatal(err)
		}
	}
	want, got := resetTrace(t, fresh), resetTrace(t, used)
	if got != want || got != first {
		t.Errorf("verdicts after Reset:\n%s\nnew limiter:\n%s\nbefore Reset:\n%s", got, want, first)
	}
	cf, err := fresh.Counters()
	if err != nil {
		t.Fatal(err)
	}
	cu, err := used.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cf, cu) {
		t.Errorf("counters after Reset %v, new limiter %v", cu, cf)
	}
}

// requireNew checks every map of l against a new limiter's: hashes, tries
// and rings empty, arrays zero but for what Load writes (the metadata,
// equal; the samplers' seeds and the ban epoch, random).
func requireNew(t *testing.T, l, fresh *maps.Limiter) {
	t.Helper()
	seeded := map[string]bool{gen.XdplimitMapXdplMeta: true, gen.XdplimitMapXdplDrops: true,
		gen.XdplimitMapXdplTraffic: true, gen.XdplimitMapXdplBanEpoch: true}
	for _, name := range maps.MapNames {
		m := l.Map(name)
		switch m.Type() {
		case ebpf.Array, ebpf.PerCPUArray:
			if seeded[name] {
				continue
			}
			if i, err := firstNonZero(m); err != nil {
				t.Fatalf("%s: %v", name, err)
			} else if i >= 0 {
				t.Errorf("%s: slot %d not zero after Reset", name, i)
			}
		case ebpf.RingBuf:
			// Drained: DrainFleetKeys finds nothing.
		default:
			key := make([]byte, m.KeySize())
			if err := m.NextKey(nil, &key); !errors.Is(err, ebpf.ErrKeyNotExist) {
				t.Errorf("%s: an entry after Reset (%v)", name, err)
			}
		}
	}
	n, err := l.DrainFleetKeys(1, func(maps.FleetKey) {})
	if err != nil || n != 0 {
		t.Errorf("fleet key ring after Reset: %d keys, %v", n, err)
	}
	mu, err := l.Meta()
	if err != nil {
		t.Fatal(err)
	}
	mf, err := fresh.Meta()
	if err != nil {
		t.Fatal(err)
	}
	// The IPv4 table's seed is each load's own (a load-time constant of its
	// program), random like the samplers' seeds.
	if mu.Table4Seed == 0 || mf.Table4Seed == 0 {
		t.Errorf("table seeds %x after Reset, %x new: want random", mu.Table4Seed, mf.Table4Seed)
	}
	mu.Table4Seed = mf.Table4Seed
	if mu != mf {
		t.Errorf("metadata after Reset %+v, new limiter %+v", mu, mf)
	}
}

// firstNonZero is the index of the first slot of array m holding a byte
// that is not zero (on any CPU), or -1.
func firstNonZero(m *ebpf.Map) (int, error) {
	n, cpus := int(m.MaxEntries()), 1
	if m.Type() == ebpf.PerCPUArray {
		cpus = ebpf.MustPossibleCPU()
	}
	keys := make([]uint32, n)
	values := maps.BytesOf(n*cpus, int(m.ValueSize()))
	var cursor ebpf.MapBatchCursor
	if _, err := m.BatchLookup(&cursor, keys, values, nil); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return 0, err
	}
	vs := reflect.ValueOf(values)
	zero := make([]byte, m.ValueSize())
	for i := range vs.Len() {
		b := vs.Index(i)
		if !bytes.Equal(b.Bytes(), zero) {
			return i / cpus, nil
		}
	}
	return -1, nil
}
