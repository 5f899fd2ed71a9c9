// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/xdplimit/xdplimit/maps"
)

// targetByPrefix is the target whose description starts with prefix.
func targetByPrefix(t *testing.T, ts []target, prefix string) target {
	t.Helper()
	for _, tg := range ts {
		if strings.HasPrefix(tg.what, prefix) {
			return tg
		}
	}
	t.Fatalf("no target %q in %+v", prefix, ts)
	return target{}
}

// wantTarget is a target's expected status and a part of its measured text.
type wantTarget struct{ prefix, status, measured string }

func checkTargets(t *testing.T, ts []target, wants []wantTarget) {
	t.Helper()
	for _, want := range wants {
		got := targetByPrefix(t, ts, want.prefix)
		if got.status != want.status || !strings.Contains(got.measured, want.measured) {
			t.Errorf("%s: %q, measured %q; want %q with %q", want.prefix, got.status, got.measured, want.status, want.measured)
		}
	}
}

// The per-packet targets are the cost above the parser alone, a known
// source's as a multiple of its floor program's, ceilings included: a
// bare XDP_DROP far below every case must change nothing, and a case
// exactly at its ceiling meets it.
func TestMicroTargetsAboveParser(t *testing.T) {
	c := func(name string, ns ...float64) *microCase { return &microCase{name: name, ns: ns} }
	m := &microResults{Cases: []*microCase{
		{name: mBare, baseline: true, ns: sample{5, 5, 5}},
		c(mParser, 40, 41, 39),
		c(mParserRotate, 42, 41, 45), // the rotation costs: the forged-source case's floor
		c(mTBDrop, 50, 49, 51),       // 10 above: met
		c(mFWDrop, 50.5, 50, 51),     // 10.5 above: not met
		c(mSWDrop, 45, 44, 46),
		c(mSpoofGDrop, 52, 51, 60), // 10 above the rotating parser, met; 12 above the other
		c(mTBPass, 70, 69, 71),     // 30 above: met
		c(mFWPass, 71, 70, 72),     // 31 above: not met
		c(mSWPass, 60),
		c(mNew1M, 140), // 2× a known source: met
		c(mNew64k, 141),
		c(mFloorRefused, 45),  // 5 above: TB drop 2× (met), FW 2.1× (not)
		c(mFloorAdmitted, 55), // 15 above: TB pass 2× (met)
		c(mFloorFW, 54),       // 14 above: FW pass 2.21× (not)
		c(mFloorSW, 50),       // 10 above: SW pass 2× (met)
		// Among 64k sources, against the rotating parser (42): 180
		// above, the floor 150 above.
		c(mKnown64kPass, 222), c(mFloorAdmitted64k, 192),
	}}
	checkTargets(t, m.targets(), []wantTarget{
		{"BPF_PROG_TEST_RUN, an admitted known source among 64k", "met",
			"TB pass, 64k sources 1.20× (180.0 ns against the floor's 150.0) (against the parser alone rotating the source the same way)"},
		{"BPF_PROG_TEST_RUN, a refused known source ≤ 2× its floor", "**NOT MET** (FW drop)",
			"TB drop 2.00× (10.0 ns against the floor's 5.0), FW drop 2.10× (10.5 ns against the floor's 5.0), SW drop 1.00×"},
		{"BPF_PROG_TEST_RUN, a packet a global level refuses", "met", "10.0 ns (52.0 − 42.0)"},
		{"BPF_PROG_TEST_RUN, an admitted known source ≤ 2× its floor", "**NOT MET** (FW pass)",
			"TB pass 2.00× (30.0 ns against the floor's 15.0), FW pass 2.21× (31.0 ns against the floor's 14.0; 2.07× the token bucket's floor, 15.0), SW pass 2.00× (20.0 ns against the floor's 10.0; 1.33× the token bucket's floor, 15.0)"},
		{"BPF_PROG_TEST_RUN, a new source into a full table ≤ 2× a known source's cost (full 1M table)", "met", "2.00×"},
		{"BPF_PROG_TEST_RUN, a new source into a full table ≤ 2× a known source's cost (full 64k table)", "**NOT MET** (new source)", "2.01×"},
		{"BPF_PROG_TEST_RUN, a new source into a full table ≤ 3× a known source's cost (full 1M table, always", "not measured", "-"},
	})
	// The always-inserted case is measured beside its floor, the insert
	// alone, reported as a multiple of the same known source; its ceiling
	// is 3×.
	m.Cases = append(m.Cases, c(mNewTracked1M, 210), c(mFloorInserted, 560))
	checkTargets(t, m.targets(), []wantTarget{
		{"BPF_PROG_TEST_RUN, a new source into a full table ≤ 3× a known source's cost (full 1M table, always", "met",
			"3.00× (210 ns vs 70 ns for a known source, token bucket, pass; 0% of the packets inserted); the floor program, a new source into a full 1M table, the program rotating the source over 2^24 addresses (its entry inserted, the least recently used evicted, the pass counted): 8.00× (560 ns vs 70 ns for a known source, token bucket, pass)"},
	})
	// Without its floor program a known source's target is not measured.
	m.Cases = slices.DeleteFunc(m.Cases, func(x *microCase) bool { return x.name == mFloorRefused })
	if got := targetByPrefix(t, m.targets(), "BPF_PROG_TEST_RUN, a refused known source"); got.status != "not measured" {
		t.Errorf("without the floor program: %+v", got)
	}
	// Without the parser alone nothing above it is measured.
	m.Cases[1].err = errors.New("boom")
	if got := targetByPrefix(t, m.targets(), "BPF_PROG_TEST_RUN, a refused known source"); got.status != "not measured" {
		t.Errorf("without the parser alone: %+v", got)
	}
}

// Measured call after call, a target case is judged on the median of its
// per-pair differences from its floor, not on the medians' difference: the
// pairs share the machine's speed where the medians may not.
func TestMicroTargetsCallAfterCall(t *testing.T) {
	c := func(name string, ns ...float64) *microCase { return &microCase{name: name, ns: ns} }
	parser, rotate := c(mParser, 50, 50, 50), c(mParserRotate, 52, 52, 52)
	tb, fw := c(mTBDrop, 62, 62, 62), c(mFWDrop, 58, 58, 58) // medians: 12 and 8 above
	spoof := c(mSpoofGDrop, 70, 70, 70)
	m := &microResults{Cases: []*microCase{parser, rotate, tb, fw, spoof}, ParserPairs: []*parserPair{
		{floor: parser, c: tb, diff: sample{9, 10, 40}},     // paired: 10, met where the medians miss
		{floor: parser, c: fw, diff: sample{11, 12, 3}},     // paired: 11, missed where the medians meet
		{floor: parser, c: spoof, diff: sample{1, 2, 3}},    // against the wrong floor: not used
		{floor: rotate, c: c(mSWDrop, 1), diff: sample{}},   // no pairs measured: the medians
		{floor: rotate, c: spoof, diff: sample{20, 21, 22}}, // the forged case's own floor
	}}
	m.Cases = append(m.Cases, c(mSWDrop, 55, 55, 55), c(mFloorRefused, 55, 55, 55))
	// A new source is judged on its ratio to a known source, call after
	// call: met there though the medians' ratio (3×) misses.
	known, newSrc := c(mTBPass, 50, 50, 50), c(mNew1M, 150, 150, 150)
	m.Cases = append(m.Cases, known, newSrc)
	m.ParserPairs = append(m.ParserPairs, &parserPair{floor: known, c: newSrc, diff: sample{45, 50, 100}, ratio: sample{1.9, 2.0, 3}})
	checkTargets(t, m.targets(), []wantTarget{
		{"BPF_PROG_TEST_RUN, a new source into a full table ≤ 2× a known source's cost (full 1M table)", "met",
			"2.00× (call after call, 1.90 – 3.00; the medians 150 ns vs 50 ns for a known source, token bucket, pass;"},
		{"BPF_PROG_TEST_RUN, a refused known source", "**NOT MET** (FW drop)",
			"TB drop 2.00× (10.0 ns against the floor's 5.0), FW drop 2.20× (11.0 ns against the floor's 5.0), SW drop 1.00× (5.0 ns against the floor's 5.0)"},
		{"BPF_PROG_TEST_RUN, a packet a global level refuses", "**NOT MET** (" + mSpoofGDrop + ")", "21.0 ns (call after call"},
	})
}

// The veth targets divide by the parser alone per CPU-second, not by the
// bare XDP_DROP nor the wall clock, and judge each ordering of the levels
// on its own configurations.
func TestMacroTargetsAgainstParser(t *testing.T) {
	cell := func(wall, cpu float64) *macroCell { return &macroCell{mpps: sample{wall}, cpuMpps: sample{cpu}} }
	conf := func(id string, single, spoof *macroCell) *macroConfig {
		return &macroConfig{id: id, cells: map[string]*macroCell{"single": single, "16M": spoof}}
	}
	m := &macroResults{Configs: []*macroConfig{
		conf("xdp-drop", cell(10, 5), cell(10, 5)),
		conf(macroParser, cell(8, 4), cell(8, 4)),
		// 0.95× the parser per CPU-s (met) though 0.76× bare and 0.5× by wall clock.
		conf("xdplimit-tb", cell(4, 3.8), cell(4, 3.6)),
		conf("xdplimit-fw", cell(8, 3.79), cell(8, 3.59)),
		conf("xdplimit-sw", cell(8, 3.9), cell(8, 3.7)),
		conf("gfirst-tb", &macroCell{}, cell(8, 3.6)),
		conf("gfirst-fw", &macroCell{}, cell(8, 3.5)),
	}}
	ts := m.targets()
	checkTargets(t, ts, []wantTarget{
		{"veth, one source over its limit", "**NOT MET** (fixed window)", "token bucket 0.95× (wall clock 0.50×; 0.76× bare XDP_DROP)"},
		{"veth, 16M forged sources", "**NOT MET** (fixed window)", "sliding window 0.93×"},
		{"veth, the same with the global level written first", "**NOT MET** (fixed window)", "token bucket 0.90×"},
	})
	if got := targetByPrefix(t, ts, "veth, the same with the global level written first"); strings.Contains(got.measured, "sliding window") {
		t.Errorf("an ordering not measured is reported: %s", got.measured)
	}
}

// The fleet level's cost: judged at 1.10× on the pairs where the level's
// state is read; the pairs the refused-until cache answers are listed, not
// judged.
func TestFleetCostTarget(t *testing.T) {
	pair := func(name string, cacheOnly bool, ratios ...float64) *fleetPair {
		return &fleetPair{host: &microCase{name: name}, fleet: &microCase{}, cacheOnly: cacheOnly, ratio: ratios}
	}
	r := &report{Micro: &microResults{FleetPairs: []*fleetPair{
		pair(mTBDrop, true, 1.3, 1.2, 1.25),
		pair(mTBPass, false, 1.0, 1.02, 1.01),
		pair(mFWDropOff, false, 1.2, 1.15, 1.11),
	}}}
	got := targetByPrefix(t, r.fleetTargets(), "a fleet level's datapath cost")
	if got.status != "**NOT MET** (FW drop (cache off))" || !strings.Contains(got.measured, "TB pass 1.010×") ||
		!strings.Contains(got.measured, "not judged, the refused-until cache answering at both scopes: TB drop 1.250×") {
		t.Errorf("fleet cost target: %+v", got)
	}
	r.Micro.FleetPairs = r.Micro.FleetPairs[:2]
	if got := targetByPrefix(t, r.fleetTargets(), "a fleet level's datapath cost"); got.status != "met" {
		t.Errorf("a cached pair over 1.10× judged: %+v", got)
	}
}

// The veth policies in both orderings compile, and to the same evaluation
// order (the global level first), which the targets' rows for the two
// orderings rely on to mean "the order written costs nothing".
func TestVethPolicyOrderings(t *testing.T) {
	for _, a := range macroAlgs {
		var order [2][]uint8
		for i, globalFirst := range []bool{false, true} {
			img, _, err := compilePolicy(xdplimitPolicy(a.name, globalFirst), nil)
			if err != nil {
				t.Fatalf("%s, global first %v: %v", a.name, globalFirst, err)
			}
			for _, l := range img.Rules[0].Levels {
				order[i] = append(order[i], l.KeyKind)
			}
		}
		want := []uint8{maps.KeyGlobal, maps.KeySrc}
		if !slices.Equal(order[0], want) || !slices.Equal(order[1], want) {
			t.Errorf("%s: levels evaluated %v written per-source first, %v written global first; want %v for both",
				a.name, order[0], order[1], want)
		}
	}
}

// Admitted 64-byte frames are judged per CPU-second against the stack
// alone behind a bare XDP_PASS, in the one scenario they run in.
func TestMacroAdmittedTarget(t *testing.T) {
	cell := func(wall, cpu float64) *macroCell { return &macroCell{mpps: sample{wall}, cpuMpps: sample{cpu}} }
	m := &macroResults{Configs: []*macroConfig{
		{id: "stack", cells: map[string]*macroCell{"64k": cell(2, 1)}},
		{id: macroAdmit, only: "64k", cells: map[string]*macroCell{"64k": cell(1, 0.8)}},
	}}
	checkTargets(t, m.targets(), []wantTarget{{"veth, 64-byte frames every one admitted", "met", "token bucket, admitted 0.80× (wall clock 0.50×)"}})
	m.Configs[1].cells["64k"] = cell(1, 0.79)
	checkTargets(t, m.targets(), []wantTarget{{"veth, 64-byte frames every one admitted", "**NOT MET** (token bucket, admitted)", "0.79×"}})
	// With its floor measured, the row says how near the stack the floor
	// came, and xdplimit against it; the judgement is xdplimit's alone.
	m.Configs = append(m.Configs, &macroConfig{id: macroAdmitFloor, only: "64k", cells: map[string]*macroCell{"64k": cell(1.5, 0.875)}})
	checkTargets(t, m.targets(), []wantTarget{{"veth, 64-byte frames every one admitted", "**NOT MET** (token bucket, admitted)",
		"the floor program, every frame admitted through the same state table: 0.88× a bare XDP_PASS (xdplimit 0.90× the floor)"}})
}
