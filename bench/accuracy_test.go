// SPDX-License-Identifier: Apache-2.0

package main

import (
	"strings"
	"testing"
	"time"
)

// A timeline of a steady flood: rate packets/s from t0 for d, sampled
// every step, with pass(k) the admitted count at sample k.
func steady(rate float64, d, step time.Duration, pass func(n uint64) uint64) []offeredAt {
	const t0 = int64(1e15) // far from zero, like a real clock, on a second
	var tl []offeredAt
	for t := time.Duration(0); t <= d; t += step {
		n := uint64(rate * t.Seconds())
		tl = append(tl, offeredAt{t: t0 + int64(t), n: n, pass: pass(n)})
	}
	return tl
}

func identity(t int64) int64 { return t }

// The references are plain arithmetic over the timeline, checked on floods
// whose answers are known by hand.
func TestReferences(t *testing.T) {
	// 1 Mpps for 2.5 s, from a window's start.
	tl := steady(1e6, 2500*time.Millisecond, time.Millisecond, func(uint64) uint64 { return 0 })
	if got := tbReference(100000, 5000).admits(tl, identity); got != 5000+100000*2.5 {
		t.Errorf("token bucket: %v, want burst + rate × 2.5 s", got)
	}
	// Windows of 1 s: two full, a third reached: 3 × the limit.
	if got := fwReference(100000, int64(time.Second)).admits(tl, identity); got != 300000 {
		t.Errorf("fixed window: %v, want 300000", got)
	}
	// Offered below the limit in a window: what was offered.
	slow := steady(1000, 2500*time.Millisecond, time.Millisecond, func(uint64) uint64 { return 0 })
	if got := fwReference(100000, int64(time.Second)).admits(slow, identity); got != 2500 {
		t.Errorf("fixed window under its limit: %v, want all 2500", got)
	}
	// The exact log admits the limit at the start, then again as each
	// admitted packet leaves the window: at 0-0.1 s, 1-1.1 s and 2-2.1 s.
	if got := exactReference(100000, int64(time.Second)).admits(tl, identity); got != 300000 {
		t.Errorf("exact sliding log: %v, want 300000", got)
	}
}

// The worst window is the largest admitted count between samples at most a
// window apart, not the total.
func TestWorstWindow(t *testing.T) {
	// Admitted: 100k in the first 0.1 s, then 150k more from 0.9 s to 1.0 s.
	tl := steady(1e6, 3*time.Second, 10*time.Millisecond, func(n uint64) uint64 {
		switch {
		case n <= 100000:
			return n
		case n < 900000:
			return 100000
		case n <= 1000000:
			return 100000 + (n-900000)*3/2
		}
		return 250000
	})
	if got := worstWindow(tl, int64(time.Second)); got != 250000 {
		t.Errorf("worst window %d, want 250000 (0 to 1.0 s)", got)
	}
	if got := worstWindow(tl, int64(500*time.Millisecond)); got != 150000 {
		t.Errorf("worst half window %d, want 150000 (0.5 to 1.0 s)", got)
	}
}

// The code that says met or NOT MET: the buckets and fixed windows by
// 1 ± 0.05 of their references, the sliding window by its worst window
// against twice its limit, never by its ratio to the exact log.
func TestAccuracyTargets(t *testing.T) {
	qs := []queueAccuracy{
		{alg: "token bucket", cpus: 1, admitted: 1049, expected: 1000},
		{alg: "fixed window", cpus: 1, admitted: 951, expected: 1000},
		{alg: "sliding window", cpus: 1, admitted: 1526, expected: 1000, worst: 152687, limitN: 100000},
		{alg: "token bucket", cpus: 2, admitted: 1051, expected: 1000},
		{alg: "fixed window", cpus: 2, err: "boom"},
		{alg: "sliding window", cpus: 2, admitted: 1000, expected: 1000, worst: 200001, limitN: 100000},
	}
	ts := accuracyTargets(qs)
	if len(ts) != 4 {
		t.Fatalf("%d targets, want 4: %+v", len(ts), ts)
	}
	for i, want := range []string{"met", "met", "**NOT MET** (token bucket, fixed window)", "**NOT MET** (sliding window)"} {
		if ts[i].status != want {
			t.Errorf("target %q: %q, want %q (measured %s)", ts[i].what, ts[i].status, want, ts[i].measured)
		}
	}
	if !strings.Contains(ts[1].measured, "worst window 152687 for a limit of 100000 (1.53×)") {
		t.Errorf("the sliding window's row does not show its worst window: %s", ts[1].measured)
	}
	// Nothing measured: no target.
	if ts := accuracyTargets(nil); len(ts) != 0 {
		t.Errorf("targets without measurements: %+v", ts)
	}
}
