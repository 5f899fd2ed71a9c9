// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

// TestBenchWalkMirrorsProgram: the harness advances a rotated frame past
// the addresses a call used by computing the program's walk itself. Should
// the two differ, the "new source" cases would quietly measure sources the
// table already holds.
func TestBenchWalkMirrorsProgram(t *testing.T) {
	testutil.RequireRoot(t)
	const n = 1 << 10
	base := netip.MustParseAddr("10.0.0.0")
	l, err := loadLimiter(maps.Options{Clock: maps.ClockCoarse, BenchRotate: n, BenchBase: base}, oneRule(tbPass), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	base32 := binary.BigEndian.Uint32(base.AsSlice())
	for _, start := range []uint32{0, 5, n - 1} {
		for _, repeat := range []uint32{1, 3, 1000} {
			frame := pktgen.UDP4(netip.AddrFrom4([4]byte{10, 0, byte(start >> 8), byte(start)}), microDst4, 4000, 53, 18)
			out := make([]byte, len(frame)+256)
			if _, err := l.Program().Run(&ebpf.RunOptions{Data: frame, DataOut: out, Repeat: repeat}); err != nil {
				t.Fatal(err)
			}
			want := start
			for range repeat {
				want = benchWalk(want, n)
			}
			if got := binary.BigEndian.Uint32(out[14+12:]) - base32; got != want {
				t.Errorf("from offset %d after %d runs: the program is at %d, the harness computes %d", start, repeat, got, want)
			}
		}
	}
}
