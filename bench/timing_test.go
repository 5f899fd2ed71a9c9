// SPDX-License-Identifier: Apache-2.0

package main

import (
	"math"
	"testing"
	"time"
)

// The slope cancels the calls' fixed part exactly and keeps the fraction
// of a nanosecond that BPF_PROG_TEST_RUN's own figure floors away.
func TestSlopeTimerArithmetic(t *testing.T) {
	var s slopeTimer
	n := s.counts(1 << 20)
	if n != [2]int{1 << 18, 1 << 20} {
		t.Fatalf("counts %v", n)
	}
	const fixed, per = 300 * time.Microsecond, 5.37 // ns
	for i, runs := range n {
		s.n[i], s.t[i] = runs, fixed+time.Duration(per*float64(runs))
	}
	s.k = 2
	got, err := s.perPacket()
	if err != nil || math.Abs(got-per) > 1e-3 {
		t.Errorf("slope %v (%v), want %v", got, err, per)
	}
	// No increase in time: no figure, an error.
	s.t[1] = s.t[0]
	if _, err := s.perPacket(); err == nil {
		t.Error("a flat slope gave a figure")
	}
	// Fewer than two calls, or counts not increasing: an error.
	if _, err := (&slopeTimer{k: 1}).perPacket(); err == nil {
		t.Error("one call gave a figure")
	}
	if _, err := (&slopeTimer{n: [2]int{8, 8}, t: [2]time.Duration{1, 2}, k: 2}).perPacket(); err == nil {
		t.Error("equal counts gave a figure")
	}
	// Small repeats still make two increasing counts.
	if c := s.counts(1); c[0] >= c[1] {
		t.Errorf("counts(1) = %v", c)
	}
}
