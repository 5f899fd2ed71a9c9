// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"strings"
)

// The Targets table: each target with the numbers measured in the run and
// whether they meet it. The datapath's targets are stated against the
// parser alone (the program loaded with the benchmark knob that drops every
// packet once its headers are read and checked as the stack would), measured
// in the same run: what the limiter adds above the check no packet may skip.
// The ratio to a bare XDP_DROP, which does nothing, stays in the tables.

// Ceilings and floors of the datapath's targets.
const (
	refusedAboveParserNs = 10   // a spoofed flood a global level refuses
	knownMaxFloor        = 2    // a known source, refused or admitted: its cost above the parser, × its floor program's
	newSourceMaxKnown    = 2    // a new source into a full table, × a known source's cost
	insertedMaxKnown     = 3    // a new source always inserted into a full 1M table, × a known source's cost
	vethSingleMinParser  = 0.95 // one source over its limit on veth, × the parser alone per CPU-s
	vethSpoofMinParser   = 0.9  // 16M forged sources, the global level refusing, × the parser alone
	cookieMinKernel      = 5    // SYNs answered with cookies per CPU-second, × the kernel's own
	vethAdmitMinPass     = 0.8  // 64-byte frames admitted on veth, per CPU-s × a bare XDP_PASS
)

type target struct {
	what, measured, status string
}

// figure is one case's number in a target's row: x is judged, shown printed.
type figure struct {
	name, shown string
	x           float64
}

// judge sets a target judged case by case: measured lists the cases,
// failed the ones that missed (none: met); note follows the list.
func (t *target) judge(parts, failed []string, note string) {
	if len(parts) == 0 {
		t.measured, t.status = "-", "not measured"
		return
	}
	f := ""
	if len(failed) > 0 {
		f = " (" + strings.Join(failed, ", ") + ")"
	}
	t.measured, t.status = strings.Join(parts, ", ")+note, met(len(failed) == 0, f)
}

// judgeFigures is judge on figures: every one printed, those for which ok
// is false named as missing the target.
func (t *target) judgeFigures(fs []figure, ok func(float64) bool, note string) {
	var parts, failed []string
	for _, f := range fs {
		parts = append(parts, f.shown)
		if !ok(f.x) {
			failed = append(failed, f.name)
		}
	}
	t.judge(parts, failed, note)
}

func atMost(limit float64) func(float64) bool  { return func(x float64) bool { return x <= limit } }
func atLeast(limit float64) func(float64) bool { return func(x float64) bool { return x >= limit } }

func met(ok bool, failures string) string {
	if ok {
		return "met"
	}
	return "**NOT MET**" + failures
}

func (r *report) targets() []target {
	var ts []target
	if m := r.Micro; m != nil {
		ts = append(ts, m.targets()...)
	}
	if s := r.SynCookie; s != nil {
		ts = append(ts, s.target())
	}
	if t := r.Traffic; t != nil {
		ts = append(ts, t.targets()...)
	}
	if m := r.Macro; m != nil {
		ts = append(ts, m.targets()...)
	}
	if d := r.DropLog; d != nil {
		ts = append(ts, d.target())
	}
	ts = append(ts, r.fleetTargets()...)
	ts = append(ts, r.fleetScaleTargets()...)
	if a := r.Accuracy; a != nil {
		ts = append(ts, accuracyTargets(a.Queues)...)
	}
	return ts
}

// measuredCase is the case named n when it has measurements.
func (m *microResults) measuredCase(n string) *microCase {
	c := m.find(n)
	if c == nil || c.err != nil || len(c.ns) == 0 {
		return nil
	}
	return c
}

// knownMultiple is case c's cost as a multiple of the known source's, and
// how it was measured: the median of the per-pair ratios when the two ran
// call after call (paired.go), else the ratio of the two medians.
func (m *microResults) knownMultiple(c, known *microCase) (float64, string) {
	medians := fmt.Sprintf("%.0f ns vs %.0f ns for a known source, token bucket, pass", c.ns.median(), known.ns.median())
	if pr := m.parserPair(known.name, c.name); pr != nil {
		return pr.ratio.median(), fmt.Sprintf("call after call, %.2f – %.2f; the medians %s", pr.ratio.min(), pr.ratio.max(), medians)
	}
	return c.ns.median() / known.ns.median(), medians
}

// above is each named case's cost above the floor case (the parser alone,
// or the parser alone rotating the source), in ns: the median of the
// differences of adjacent calls when the pair was measured call after call
// (paired.go), else the difference of the two medians. Both are CPU-time
// slopes (slopeTimer), not the kernel's whole-ns figure, so neither is
// rounded to a nanosecond.
func (m *microResults) above(floor string, names ...string) []figure {
	p := m.measuredCase(floor)
	if p == nil {
		return nil
	}
	var fs []figure
	for _, n := range names {
		c := m.measuredCase(n)
		if c == nil {
			continue
		}
		medians := fmt.Sprintf("%.1f − %.1f", c.ns.median(), p.ns.median())
		if pr := m.parserPair(floor, n); pr != nil {
			x := pr.diff.median()
			fs = append(fs, figure{name: shortAlg(n), x: x,
				shown: fmt.Sprintf("%s %.1f ns (call after call, %.1f – %.1f; the medians' difference %s)",
					shortAlg(n), x, pr.diff.min(), pr.diff.max(), medians)})
			continue
		}
		x := c.ns.median() - p.ns.median()
		fs = append(fs, figure{name: shortAlg(n), x: x, shown: fmt.Sprintf("%s %.1f ns (%s)", shortAlg(n), x, medians)})
	}
	return fs
}

// parserNote says what the parser alone cost in the run, and its ratio to
// a bare XDP_DROP.
func (m *microResults) parserNote() string {
	p := m.measuredCase(mParser)
	if p == nil {
		return ""
	}
	bare := ""
	if b := m.baseline(); b > 0 {
		bare = fmt.Sprintf(", %.2f× bare XDP_DROP", p.ns.median()/b)
	}
	return fmt.Sprintf("; the parser alone %.1f ns%s", p.ns.median(), bare)
}

func (m *microResults) targets() []target {
	const what = "BPF_PROG_TEST_RUN, "
	note := m.parserNote()
	var ts []target
	for _, g := range []struct {
		what  string
		cases []string
	}{
		{"a refused known source", []string{mTBDrop, mFWDrop, mSWDrop}},
		{"an admitted known source", []string{mTBPass, mFWPass, mSWPass}},
	} {
		t := target{what: fmt.Sprintf("%s%s ≤ %d× its floor program, both above the parser alone", what, g.what, knownMaxFloor)}
		t.judgeFigures(m.overFloor(mParser, g.cases), atMost(knownMaxFloor), note)
		ts = append(ts, t)
	}
	// The same among many sources, as a host's clients are: each packet's
	// state a cache miss in the table, which the floor pays too.
	t := target{what: fmt.Sprintf("%san admitted known source among 64k (1M table, the program rotating the source) ≤ %d× its floor program, both above the parser alone",
		what, knownMaxFloor)}
	t.judgeFigures(m.overFloor(mParserRotate, []string{mKnown64kPass}), atMost(knownMaxFloor),
		" (against the parser alone rotating the source the same way)"+note)
	ts = append(ts, t)
	t = target{what: fmt.Sprintf("%sa packet a global level refuses, 16M forged sources (the program rotates the source), ≤ %d ns above the parser alone",
		what, refusedAboveParserNs)}
	t.judgeFigures(m.above(mParserRotate, mSpoofGDrop), atMost(refusedAboveParserNs),
		" (against the parser alone rotating the source the same way)"+m.floorNote(mParserRotate, []string{mSpoofGDrop})+note)
	ts = append(ts, t)

	known := m.measuredCase(mTBPass)
	for _, n := range []string{mNew1M, mNew64k, mNewTracked1M} {
		limit, note := newSourceMaxKnown, m.newFloorNote(mFloorUntracked, known)
		if n == mNewTracked1M {
			limit, note = insertedMaxKnown, m.newFloorNote(mFloorInserted, known)
		}
		t := target{what: fmt.Sprintf("%sa new source into a full table ≤ %d× a known source's cost (%s)",
			what, limit, strings.TrimPrefix(n, "new source into a "))}
		var fs []figure
		if c := m.measuredCase(n); c != nil && known != nil {
			x, how := m.knownMultiple(c, known)
			fs = append(fs, figure{name: "new source", x: x,
				shown: fmt.Sprintf("%.2f× (%s; %s of the packets inserted)", x, how, pct(c.inserts))})
		}
		t.judgeFigures(fs, atMost(float64(limit)), note)
		ts = append(ts, t)
	}
	return ts
}

// overFloor is each case's cost above the parser alone (parser: the case
// of the same frames) as a multiple of its floor program's (floorOf): the
// program that does only what the verdict cannot do without, on the same
// frame and table.
func (m *microResults) overFloor(parser string, cases []string) []figure {
	var fs []figure
	for _, c := range cases {
		f, floor := m.above(parser, c), m.above(parser, floorOf[c])
		if len(f) == 0 || len(floor) == 0 || floor[0].x <= 0 {
			continue
		}
		x := f[0].x / floor[0].x
		also := ""
		if a := m.above(parser, alsoFloor[c]); len(a) > 0 && a[0].x > 0 {
			also = fmt.Sprintf("; %.2f× the token bucket's floor, %.1f", f[0].x/a[0].x, a[0].x)
		}
		fs = append(fs, figure{name: f[0].name, x: x,
			shown: fmt.Sprintf("%s %.2f× (%.1f ns against the floor's %.1f%s)", f[0].name, x, f[0].x, floor[0].x, also)})
	}
	return fs
}

// ratioFigures are the configurations' rates per CPU-second over base's in
// one scenario, with the wall-clock ratio and, when bare is set, the ratio
// to a bare XDP_DROP beside each.
func (m *macroResults) ratioFigures(configs []string, base, scenario string, bare bool) []figure {
	var fs []figure
	for _, c := range configs {
		x := m.ratio(c, base, scenario, true)
		if x == 0 {
			continue
		}
		extra := ""
		if bare {
			extra = fmt.Sprintf("; %.2f× bare XDP_DROP", m.ratio(c, "xdp-drop", scenario, true))
		}
		fs = append(fs, figure{name: shortConfig(c), x: x,
			shown: fmt.Sprintf("%s %.2f× (wall clock %.2f×%s)", shortConfig(c), x, m.ratio(c, base, scenario, false), extra)})
	}
	return fs
}

func (m *macroResults) targets() []target {
	var perSource, globalFirst []string
	for _, a := range macroAlgs {
		perSource, globalFirst = append(perSource, a.id), append(globalFirst, a.globalFirst)
	}
	parserNote := func(scenario string) string {
		if x := m.ratio(macroParser, "xdp-drop", scenario, true); x > 0 {
			return fmt.Sprintf(" (the parser alone %.2f× bare XDP_DROP)", x)
		}
		return ""
	}
	var ts []target
	// add judges configs against base in scenario; note follows the
	// figures where base is not the parser alone (which has its own).
	add := func(what string, configs []string, base, scenario string, min float64, note ...string) {
		t := target{what: what}
		if base == macroParser {
			t.judgeFigures(m.ratioFigures(configs, base, scenario, true), atLeast(min), parserNote(scenario))
		} else {
			t.judgeFigures(m.ratioFigures(configs, base, scenario, false), atLeast(min), strings.Join(note, ""))
		}
		ts = append(ts, t)
	}
	add(fmt.Sprintf("veth, one source over its limit ≥ %.2f× the parser alone", vethSingleMinParser), perSource, macroParser, "single", vethSingleMinParser)
	add(fmt.Sprintf("veth, 16M forged sources, per-source + global levels, the global level refusing, the per-source level written first ≥ %.1f× the parser alone", vethSpoofMinParser),
		perSource, macroParser, "16M", vethSpoofMinParser)
	add(fmt.Sprintf("veth, the same with the global level written first ≥ %.1f× the parser alone", vethSpoofMinParser),
		globalFirst, macroParser, "16M", vethSpoofMinParser)
	admittedFloor := ""
	if x := m.ratio(macroAdmitFloor, "stack", "64k", true); x > 0 {
		admittedFloor = fmt.Sprintf("; the floor program, every frame admitted through the same state table: %.2f× a bare XDP_PASS (xdplimit %.2f× the floor)",
			x, m.ratio(macroAdmit, macroAdmitFloor, "64k", true))
	}
	add(fmt.Sprintf("veth, 64-byte frames every one admitted to the stack, 64k known sources, per CPU-second ≥ %.1f× a bare XDP_PASS", vethAdmitMinPass),
		[]string{macroAdmit}, "stack", "64k", vethAdmitMinPass, admittedFloor)
	add("veth single-source flood ≥ 3× the nftables set", perSource, "nft-set", "single", 3)
	add("veth single-source flood ≥ 2× iptables hashlimit", perSource, "hashlimit", "single", 2)
	add("veth 16M-source flood ≥ 3× nftables", perSource, "nft-set", "16M", 3)
	add("veth 16M-source flood ≥ 3× iptables hashlimit", perSource, "hashlimit", "16M", 3)
	return ts
}
