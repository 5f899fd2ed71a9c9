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
	mFloorRefused  = "floor: a known source refused (one keyed per-CPU slot, the clock, the drop counted)"
	mFloorGlobal   = "floor: a global level refusing, the program rotating the source over 2^24 addresses (its array slot, the clock, the drop counted)"
	mFloorAdmitted = "floor: a known source admitted (the shared state table, the clock, one compare-and-swap, the pass counted)"
	mFloorInserted = "floor: a new source into a full 1M table, the program rotating the source over 2^24 addresses (its entry inserted, the least recently used evicted, the pass counted)"
)

// floorOf names the floor program of each per-packet target's cases.
var floorOf = map[string]string{
	mTBDrop: mFloorRefused, mFWDrop: mFloorRefused, mSWDrop: mFloorRefused,
	mSpoofGDrop: mFloorGlobal,
	mTBPass:     mFloorAdmitted, mFWPass: mFloorAdmitted, mSWPass: mFloorAdmitted,
}

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
	add(&microCase{group: floorGroup, name: mFloorInserted, want: xdpPass, warm: 1<<20 + 1<<16, rotate: 1 << 24, base: base, floor: mParserRotate},
		limiter(maps.Options{Clock: maps.ClockCoarse, MaxSources: 1 << 20, BenchFloor: maps.FloorInserted,
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

// insertFloorNote says what the insert floor costs against a known source,
// for the target on a new source always inserted: a ratio the floor alone
// exceeds is one this state table rules out. "" when it was not measured.
func (m *microResults) insertFloorNote(known *microCase) string {
	c := m.measuredCase(mFloorInserted)
	if c == nil || known == nil {
		return ""
	}
	x, how := m.knownMultiple(c, known)
	return fmt.Sprintf("; the floor program, %s: %.2f× (%s)", strings.TrimPrefix(mFloorInserted, "floor: "), x, how)
}
