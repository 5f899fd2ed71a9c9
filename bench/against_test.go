// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"strings"
	"testing"
)

// The against table gives each case both builds' medians and the median
// of the per-pair differences, signed; a case that failed says why.
func TestAgainstTable(t *testing.T) {
	c := func(ns ...float64) *microCase { return &microCase{ns: ns} }
	r := &report{Against: &againstResults{Object: "bench/out/against-HEAD~1.o", Rounds: 3, Pairs: []*againstPair{
		{name: "a known source refused, token bucket", this: c(20, 21, 22), other: c(23, 23, 25), diff: sample{-3, -2, -3}},
		{name: "a known source admitted, token bucket", this: c(30, 31, 30), other: c(29, 29, 29), diff: sample{1, 2, 1}},
		{name: "a known source admitted, fixed window", err: errors.New("boom")},
		{name: "a known source admitted, sliding window"},
	}}}
	var b strings.Builder
	r.writeAgainst(&b)
	for _, want := range []string{
		"## This build against bench/out/against-HEAD~1.o",
		"for 3 rounds",
		"| a known source refused, token bucket | 21.0 | 23.0 | -3.0 | -3.0 – -2.0 |",
		"| a known source admitted, token bucket | 30.0 | 29.0 | +1.0 | +1.0 – +2.0 |",
		"| a known source admitted, fixed window | - | - | boom | - |",
		"| a known source admitted, sliding window | - | - | not measured | - |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("missing %q in\n%s", want, b.String())
		}
	}
}
