// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"strings"
)

// The per-packet targets, cost above the parser alone, call after call.
//
// This machine runs at two speeds: one CPU-time slope of the same program
// reads ~1.4× longer for stretches of tens to hundreds of milliseconds
// (another tenant on the host's sibling thread, by its look), and both
// programs of a pair slow down together. The interleaved rounds of the
// per-packet table put a second between a case's call and the parser's, so
// the difference of their medians can subtract a slow parser from a fast
// case or the reverse: a 10 ns ceiling is inside that swing (the parser
// alone moves ~15 ns between the speeds). Measured call after call, a case
// and its floor mostly share one speed, and the median of the per-pair
// differences is the figure the targets are judged on.

// parserPairs are the target cases, each with the floor it is judged
// against: the parser alone, or for a new source the known one whose cost
// the target multiplies (a ratio the machine's speed moves as much as a
// difference, when its two cases run a second apart).
var parserPairs = []struct {
	floor string
	cases []string
}{
	{mParser, []string{mTBDrop, mFWDrop, mSWDrop, mTBPass, mFWPass, mSWPass, mFloorRefused, mFloorAdmitted,
		mFloorFW, mFloorSW}},
	{mParserRotate, []string{mSpoofGDrop, mSpoofGDropLate, mFloorGlobal, mKnown64kPass, mFloorAdmitted64k}},
	{mTBPass, []string{mNew1M, mNew64k, mNewTracked1M, mFloorInserted, mFloorUntracked}},
}

// parserPair is a target case and its floor measured call after call.
type parserPair struct {
	floor, c *microCase
	diff     sample // c's ns − the floor's, per adjacent pair of calls
	ratio    sample // c's ns / the floor's, per pair
}

// adjacentCalls measures a then b (b then a in odd rounds, so that neither
// always runs right after another pair's cases), each by its slope, on the
// caller's pinned thread; it returns a's ns and b's.
func adjacentCalls(a, b *microCase, round, repeat int) (float64, float64, error) {
	first, second := a, b
	if round%2 == 1 {
		first, second = b, a
	}
	x, err := first.run(repeat)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", first.name, err)
	}
	y, err := second.run(repeat)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", second.name, err)
	}
	if first == b {
		x, y = y, x
	}
	return x, y, nil
}

// measureParserPairs measures each target case against its floor, call
// after call, rounds times.
func (r *microResults) measureParserPairs(e *env, rounds int) error {
	for _, g := range parserPairs {
		floor := r.measuredCase(g.floor)
		if floor == nil {
			continue
		}
		for _, n := range g.cases {
			if c := r.measuredCase(n); c != nil {
				r.ParserPairs = append(r.ParserPairs, &parserPair{floor: floor, c: c})
			}
		}
	}
	return pairRounds(e, "pairs with the parser alone", rounds, func(i int) error {
		for _, p := range r.ParserPairs {
			f, c, err := adjacentCalls(p.floor, p.c, i, r.Repeat)
			if err != nil {
				return err
			}
			p.diff, p.ratio = append(p.diff, c-f), append(p.ratio, c/f)
		}
		return nil
	})
}

// pairRounds runs round(i) for each of rounds rounds of call-after-call
// pairs (what names them in the log), stopping at the first error or when
// the run's context ends.
func pairRounds(e *env, what string, rounds int, round func(i int) error) error {
	for i := range rounds {
		e.Logf("micro: %s, round %d of %d", what, i+1, rounds)
		if err := round(i); err != nil {
			return err
		}
		if err := e.ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

// parserPair is the pair of case n against floor, when it was measured.
func (r *microResults) parserPair(floor, n string) *parserPair {
	for _, p := range r.ParserPairs {
		if p.floor.name == floor && p.c.name == n && len(p.diff) > 0 {
			return p
		}
	}
	return nil
}

func (r *report) writeParserPairs(b *strings.Builder) {
	m := r.Micro
	if m == nil || len(m.ParserPairs) == 0 {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("### Above the parser alone, call after call\n\n")
	p("The targets' cases, each measured against its floor call after call, %d times, which goes first\n", len(m.ParserPairs[0].diff))
	p("alternating; the cost above the floor is the median of the per-pair differences, and it is what the\n")
	p("targets are judged on (a new source's, whose floor is a known source, on the median of the per-pair\n")
	p("ratios). This machine runs at two speeds, ~1.4× apart, for stretches of tens to\n")
	p("hundreds of milliseconds, and a case and its floor slow down together: the table above, whose\n")
	p("rounds put a second between them, may subtract one speed from the other (its \"above\" column),\n")
	p("where adjacent calls mostly share one. The per-pair ratio does not depend on the speed.\n\n")
	p("| Case | Floor | Above the floor, ns (min – max) | Ratio to the floor (min – max) | The table's medians' difference |\n|---|---|---:|---:|---:|\n")
	for _, pr := range m.ParserPairs {
		p("| %s | %s | %.1f (%.1f – %.1f) | %.2f× (%.2f – %.2f) | %.1f |\n", pr.c.name, floorName(pr.floor.name),
			pr.diff.median(), pr.diff.min(), pr.diff.max(), pr.ratio.median(), pr.ratio.min(), pr.ratio.max(),
			pr.c.ns.median()-pr.floor.ns.median())
	}
	p("\n")
}

func floorName(n string) string {
	switch n {
	case mParserRotate:
		return "the parser alone, rotating the source"
	case mTBPass:
		return "a known source (" + mTBPass + ")"
	}
	return "the parser alone"
}
