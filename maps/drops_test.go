// SPDX-License-Identifier: Apache-2.0

package maps_test

import (
	"net/netip"
	"testing"

	"github.com/xdplimit/xdplimit/internal/cpupin"
	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/maps"
)

// The sample rate is the generation's: a reload that asks for every drop
// (log: sample: 1) gets every drop into the ring at once, and a reload back
// to the default one in 64.
func TestDropSampleRateFollowsReload(t *testing.T) {
	const rules = `
rules:
  - name: r
    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}
`
	l := loadWith(t, maps.Options{Clock: maps.ClockMap}, rules+"log: {sample: 1}\n")
	pkt := udp4("192.0.2.7").MustBuild()
	count := func(n int) uint64 {
		t.Helper()
		_, _, cursor, err := l.DropRing(nil)
		if err != nil {
			t.Fatal(err)
		}
		repeatRun(t, l, pkt, n)
		_, written, _, err := l.DropRing(cursor)
		if err != nil {
			t.Fatal(err)
		}
		return written
	}
	xdpltest.Run(t, l, pkt, t0) // the one packet the burst admits
	if got := count(200); got != 200 {
		t.Errorf("sample: 1 sampled %d of 200 drops", got)
	}
	if err := l.Apply(xdpltest.Compile(t, rules)); err != nil {
		t.Fatal(err)
	}
	// 6400 drops at one in 64: 100 expected, standard deviation ~10.
	if got := count(6400); got < 60 || got > 140 {
		t.Errorf("the default sampled %d of 6400 drops, want about 100", got)
	}
}

// Each CPU's ring keeps the newest samples: a reader that fell behind by
// more than a ring gets the last ring's worth (but the slot the datapath
// writes next), in the order they were
// written, and is told how many were written; readers keep cursors of
// their own. The source port numbers the drops.
func TestDropRingKeepsTheNewest(t *testing.T) {
	l := loadWith(t, maps.Options{Clock: maps.ClockMap}, `
rules:
  - name: r
    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}
log: {sample: 1}
`)
	size := int(l.DropRingSize())
	if size < 1024 || size&(size-1) != 0 {
		t.Fatalf("each CPU's ring holds %d samples: want a power of two of at least 1024", size)
	}
	extra := 500
	frame := func(i int) []byte {
		f := udp4("192.0.2.7")
		f.SrcPort = uint16(1 + i%60000)
		return f.MustBuild()
	}
	read := func(cursor []uint64) ([]maps.DropSample, uint64, []uint64) {
		t.Helper()
		s, w, next, err := l.DropRing(cursor)
		if err != nil {
			t.Fatal(err)
		}
		return s, w, next
	}
	// Every run on one CPU, so that one ring takes every sample.
	err := cpupin.OnCPU(0, func() error {
		xdpltest.Run(t, l, frame(0), t0) // the one packet the burst admits
		_, _, a := read(nil)
		for i := range 100 {
			xdpltest.Run(t, l, frame(1+i), t0)
		}
		_, _, b := read(nil)
		for i := 100; i < size+extra; i++ {
			xdpltest.Run(t, l, frame(1+i), t0)
		}
		for name, cursor := range map[string][]uint64{"behind by all": a, "behind by all but 100": b} {
			samples, written, next := read(cursor)
			want := uint64(size + extra)
			if name != "behind by all" {
				want -= 100
			}
			if written != want || len(samples) != size-1 {
				t.Fatalf("%s: %d samples of %d written, want %d of %d", name, len(samples), written, size-1, want)
			}
			for k, s := range samples {
				if w := uint16(1 + (extra+k+2)%60000); s.SrcPort != w {
					t.Fatalf("%s: sample %d has port %d, want %d: the newest %d, in order", name, k, s.SrcPort, w, size-1)
				}
			}
			if s, w, _ := read(next); len(s) != 0 || w != 0 {
				t.Errorf("%s: read again, %d samples of %d written", name, len(s), w)
			}
		}
		syn := tcp4("198.51.100.9").MustBuild()
		xdpltest.Run(t, l, syn, t0) // a new source's burst
		_, _, c := read(nil)
		xdpltest.Run(t, l, syn, t0)
		samples, written, _ := read(c)
		if written != 1 || len(samples) != 1 {
			t.Fatalf("one drop: %d samples of %d written", len(samples), written)
		}
		s := samples[0]
		if s.Source != netip.MustParseAddr("198.51.100.9") || s.Destination != netip.MustParseAddr("10.0.0.1") ||
			s.Protocol != 6 || !s.HasPorts || s.SrcPort != 4000 || s.DstPort != 80 || s.Verdict != maps.VerdictDrop {
			t.Errorf("the sample of a TCP SYN from 198.51.100.9 reads %+v", s)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
