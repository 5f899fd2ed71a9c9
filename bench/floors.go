// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/maps"
)

// The floor programs (bpf/floor.h): after the parser, only the work any
// limiter must do for a verdict, written as cheaply as BPF allows. Their
// cost above the parser alone, measured call after call beside the
// targets' cases, is how far below the product's cost a verdict can come
// on this machine: a target under its floor is one the machine rules out,
// not one the design misses.

const floorGroup = "Floors: after the parser, only what any limiter must do for the verdict"

const (
	mFloorRefused     = "floor: a known source refused (one keyed per-CPU slot, the clock, the drop counted)"
	mFloorGlobal      = "floor: a global level refusing, the program rotating the source over 2^24 addresses (its array slot, the clock, the drop counted)"
	mFloorAdmitted    = "floor: a known source admitted (the shared state table, the clock, one compare-and-swap, the pass counted)"
	mFloorAdmitted64k = "floor: an admitted known source among 64k, 1M table, the program rotating the source over them (the shared state table, the clock, one compare-and-swap, the pass counted)"
	mFloorFW          = "floor: a known source admitted by a fixed window (the shared state table, the clock against the window's end, one compare-and-swap, the pass counted)"
	mFloorSW          = "floor: a known source admitted by a sliding window (the shared state table, the window's index by one division, the previous window's share by multiplying, one compare-and-swap, the pass counted)"
	mFloorInserted    = "floor: a new source into a full 1M table, the program rotating the source over 2^24 addresses (its entry inserted, the least recently used evicted, the pass counted)"
	mFloorUntracked   = "floor: a new source left without an entry, the program rotating the source over 2^24 addresses (one random line of the CPU's 8 MiB sketch region read and written, the pass counted)"
)

// floorOf names the floor program of each per-packet target's cases: an
// admitted source's is its own algorithm's (a window's verdict needs more
// than a token bucket's step).
var floorOf = map[string]string{
	mTBDrop: mFloorRefused, mFWDrop: mFloorRefused, mSWDrop: mFloorRefused,
	mSpoofGDrop: mFloorGlobal,
	mTBPass:     mFloorAdmitted, mFWPass: mFloorFW, mSWPass: mFloorSW,
	mKnown64kPass: mFloorAdmitted64k,
}

// alsoFloor names a second floor a case's row shows itself against: the
// windows' against the token bucket's, the cheapest admitted verdict.
var alsoFloor = map[string]string{mFWPass: mFloorAdmitted, mSWPass: mFloorAdmitted}

// addFloorCases adds the floor programs, each on the frame, source walk
// and table size of the cases it is the floor of.
func addFloorCases(add func(*microCase, func(*microCase) (*ebpf.Program, error)),
	limiter func(maps.Options, string, map[string][]byte) func(*microCase) (*ebpf.Program, error), base uint32) {
	add(&microCase{group: floorGroup, name: mFloorRefused, want: xdpDrop, warm: 1000},
		limiter(maps.Options{Clock: maps.ClockCoarse, MaxSources: 1 << 16, BenchFloor: maps.FloorRefused}, oneRule(tbDrop), nil))
	add(&microCase{group: floorGroup, name: mFloorGlobal, want: xdpDrop, warm: 1000, rotate: 1 << 24, base: base, floor: mParserRotate},
		limiter(maps.Options{Clock: maps.ClockCoarse, MaxSources: 1 << 16, BenchFloor: maps.FloorGlobal,
			BenchRotate: 1 << 24, BenchBase: microBase}, oneRule(tbDrop), nil))
	add(&microCase{group: floorGroup, name: mFloorAdmitted, want: xdpPass, warm: 1000},
		limiter(maps.Options{Clock: maps.ClockCoarse, MaxSources: 1 << 16, BenchFloor: maps.FloorAdmitted}, oneRule(tbPass), nil))
	add(&microCase{group: floorGroup, name: mFloorAdmitted64k, want: xdpPass, warm: 11 << 16, rotate: 1 << 16, base: base, floor: mParserRotate},
		limiter(maps.Options{Clock: maps.ClockCoarse, MaxSources: 1 << 20, BenchFloor: maps.FloorAdmitted,
			BenchRotate: 1 << 16, BenchBase: microBase}, oneRule(tbPass), nil))
	add(&microCase{group: floorGroup, name: mFloorFW, want: xdpPass, warm: 1000},
		limiter(maps.Options{Clock: maps.ClockCoarse, MaxSources: 1 << 16, BenchFloor: maps.FloorAdmittedFW}, oneRule(fwPass), nil))
	add(&microCase{group: floorGroup, name: mFloorSW, want: xdpPass, warm: 1000},
		limiter(maps.Options{Clock: maps.ClockCoarse, MaxSources: 1 << 16, BenchFloor: maps.FloorAdmittedSW}, oneRule(swPass), nil))
	add(&microCase{group: floorGroup, name: mFloorInserted, want: xdpPass, warm: 1<<20 + 1<<16, rotate: 1 << 24, base: base, floor: mParserRotate},
		limiter(maps.Options{Clock: maps.ClockCoarse, MaxSources: 1 << 20, BenchFloor: maps.FloorInserted,
			BenchRotate: 1 << 24, BenchBase: microBase}, oneRule(tbPass), nil))
	add(&microCase{group: floorGroup, name: mFloorUntracked, want: xdpPass, warm: 1 << 16, rotate: 1 << 24, base: base, floor: mParserRotate},
		limiter(maps.Options{Clock: maps.ClockCoarse, MaxSources: 1 << 20, BenchFloor: maps.FloorUntracked,
			BenchRotate: 1 << 24, BenchBase: microBase}, oneRule(tbPass), nil))
}

// floorNote says what the floor program of cases costs above the parser
// (the floor case against the same parser case, call after call), for a
// target's row; "" when it was not measured.
func (m *microResults) floorNote(parser string, cases []string) string {
	if len(cases) == 0 {
		return ""
	}
	f := floorOf[cases[0]]
	if f == "" {
		return ""
	}
	fs := m.above(parser, f)
	if len(fs) == 0 {
		return ""
	}
	return fmt.Sprintf("; the floor program, %s: %.1f ns above the parser", strings.TrimPrefix(f, "floor: "), fs[0].x)
}

// newFloorNote says what a new source's floor program (mFloorInserted: the
// insert; mFloorUntracked: the sketch's line) costs against a known source,
// for the targets on new sources: a ratio the floor alone exceeds is one
// this machine rules out for that design. "" when it was not measured.
func (m *microResults) newFloorNote(floor string, known *microCase) string {
	c := m.measuredCase(floor)
	if c == nil || known == nil {
		return ""
	}
	x, how := m.knownMultiple(c, known)
	return fmt.Sprintf("; the floor program, %s: %.2f× (%s)", strings.TrimPrefix(floor, "floor: "), x, how)
}
