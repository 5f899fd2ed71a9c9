// SPDX-License-Identifier: Apache-2.0

package model

import (
	"math/rand/v2"
	"testing"
)

// TestExactLogAgainstBruteForce compares ExactLog with a scan of every admitted time.
func TestExactLogAgainstBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 50; trial++ {
		window := 1 + r.Uint64N(1000)
		limit := 1 + r.IntN(20)
		l := NewExactLog(window, limit)
		var admitted []uint64
		now := uint64(0)
		for i := 0; i < 2000; i++ {
			now += r.Uint64N(2 * window / uint64(limit+1))
			n := 0
			for _, s := range admitted {
				if s+window > now {
					n++
				}
			}
			want := n < limit
			if got := l.Admit(now); got != want {
				t.Fatalf("trial %d packet %d at %d: got %v, want %v (%d admitted in the window, limit %d)", trial, i, now, got, want, n, limit)
			}
			if want {
				admitted = append(admitted, now)
			}
		}
	}
}

func TestExactLogBoundary(t *testing.T) {
	l := NewExactLog(100, 2)
	for _, c := range []struct {
		at   uint64
		want bool
	}{{0, true}, {10, true}, {99, false}, {100, true}, {109, false}, {110, true}, {199, false}, {200, true}} {
		if got := l.Admit(c.at); got != c.want {
			t.Errorf("at %d: got %v, want %v", c.at, got, c.want)
		}
	}
}

// TestExactLogCountOverLimit: a log fed by another decider may hold more than the
// limit; Count stays exact.
func TestExactLogCountOverLimit(t *testing.T) {
	l := NewExactLog(100, 2)
	for i := uint64(0); i < 10; i++ {
		l.Add(i * 10)
	}
	if n := l.Count(95); n != 10 {
		t.Errorf("count at 95: %d, want 10", n)
	}
	if n := l.Count(150); n != 4 { // 60, 70, 80, 90
		t.Errorf("count at 150: %d, want 4", n)
	}
	if l.Allows(150) {
		t.Error("allows over the limit")
	}
	if !l.Allows(200) {
		t.Error("refuses an empty window")
	}
}
