// SPDX-License-Identifier: Apache-2.0

package maps_test

import (
	"fmt"
	"net/netip"
	"runtime"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/internal/cpupin"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
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

// The rings read while the datapath writes them from another CPU: every
// sample a reader keeps is one packet's, whole (its source address and its
// port name the same frame), each drop is counted once, and the samples
// kept and those overwritten before they were read add up to what was
// written. A reader that took a sample before the datapath published it,
// or one it was overwriting, would mix two frames.
func TestDropRingReadWhileWritten(t *testing.T) {
	testutil.Require(t, runtime.NumCPU() >= 2, "a writer and a reader on two CPUs: %d CPU", runtime.NumCPU())
	l := loadWith(t, maps.Options{Clock: maps.ClockMap, SampleOneIn: 1}, "deny: [10.0.0.0/8]\n")
	if err := l.SetClock(uint64(t0)); err != nil {
		t.Fatal(err)
	}
	const kinds, runs = 1024, 150000
	frames := make([][]byte, kinds)
	for k := range frames {
		f := udp4(fmt.Sprintf("10.0.%d.%d", k>>8, k&255))
		f.SrcPort = uint16(1000 + k)
		frames[k] = f.MustBuild()
	}
	done := make(chan error, 1)
	go func() {
		done <- cpupin.OnCPU(1, func() error {
			for i := range runs {
				if _, err := l.Program().Run(&ebpf.RunOptions{Data: frames[i%kinds], Repeat: 1}); err != nil {
					return err
				}
			}
			return nil
		})
	}()
	var cursor []uint64
	var kept, written uint64
	read := func() {
		samples, w, next, err := l.DropRing(cursor)
		if err != nil {
			t.Fatal(err)
		}
		cursor, written, kept = next, written+w, kept+uint64(len(samples))
		for _, s := range samples {
			a := s.Source.As4()
			if k := int(a[2])<<8 | int(a[3]); !s.Deny || s.SrcPort != uint16(1000+k) {
				t.Fatalf("sample %+v: not one frame's (port %d for source %v)", s, s.SrcPort, s.Source)
			}
		}
	}
	err := cpupin.OnCPU(0, func() error {
		for {
			select {
			case err := <-done:
				read()
				return err
			default:
				read()
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d drops written, %d samples read while written (the rest overwritten first)", written, kept)
	if written != runs || kept == 0 || kept > written {
		t.Errorf("%d drops counted, %d samples read: want %d counted and some read", written, kept, runs)
	}
}
