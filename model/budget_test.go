// SPDX-License-Identifier: Apache-2.0

package model

import (
	"math/rand/v2"
	"testing"
	"time"
)

// admitsInARow counts Admit's grants of one unit at now, one after
// another, on a copy of s.
func admitsInARow(s State, p Params, now uint64) uint64 {
	var n uint64
	for n < 100000 && s.Admit(p, now, 1) {
		n++
	}
	return n
}

// TestBudgetIsAdmit: a Budget says what Admit decides. Random traces run
// through each algorithm; at random times the budget is checked against
// Admit itself: Remaining grants in a row now, the first grant at
// RetryAfter and none a nanosecond before, all Limit of them at Reset and
// not a nanosecond before.
func TestBudgetIsAdmit(t *testing.T) {
	mustTB := func(count uint64, per time.Duration, burst uint64) Params {
		p, err := TokenBucketParams(count, per, burst, false)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	mustW := func(alg uint8, limit uint64, w time.Duration) Params {
		p, err := WindowParams(alg, limit, w)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	mustLog := func(limit uint64, w time.Duration) Params {
		p, err := SlidingLogParams(limit, w)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	fleet := mustW(AlgFixedWindow, 50, time.Second)
	fleet.P3, fleet.Reserve = 123456789, 20
	for _, c := range []struct {
		name string
		p    Params
	}{
		{"token bucket", mustTB(100, time.Second, 20)},
		{"token bucket, slow", mustTB(3, time.Minute, 2)},
		{"token bucket, fast", mustTB(1_000_000, time.Second, 1000)},
		{"fixed window", mustW(AlgFixedWindow, 30, 100*time.Millisecond)},
		{"fixed window of a fleet", fleet},
		{"sliding window", mustW(AlgSlidingWindow, 40, 250*time.Millisecond)},
		{"sliding log", mustLog(7, 300*time.Millisecond)},
	} {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(len(c.name))))
			var s State
			now := uint64(10 * time.Second)
			for i := 0; i < 4000; i++ {
				// Bursts and pauses: steps from 0 to a few ms, now and
				// then a long one.
				step := rng.Uint64N(3 * uint64(time.Millisecond))
				if rng.IntN(50) == 0 {
					step = rng.Uint64N(uint64(time.Second))
				}
				now += step
				s.Admit(c.p, now, 1)
				if i%7 != 0 {
					continue
				}
				check(t, s, c.p, now+rng.Uint64N(uint64(time.Millisecond)))
			}
		})
	}
}

func check(t *testing.T, s State, p Params, now uint64) {
	t.Helper()
	b := s.Budget(p, now)
	if got := admitsInARow(s, p, now); got != b.Remaining {
		t.Fatalf("at %d: Remaining %d, Admit grants %d in a row (state %+v)", now, b.Remaining, got, s)
	}
	if fresh := admitsInARow(State{}, p, now); fresh != b.Limit {
		t.Fatalf("Limit %d, Admit grants a fresh state %d", b.Limit, fresh)
	}
	if (b.RetryAfter == 0) != (b.Remaining > 0) {
		t.Fatalf("at %d: RetryAfter %d with Remaining %d", now, b.RetryAfter, b.Remaining)
	}
	if b.RetryAfter > 0 {
		if c := s; !c.Admit(p, now+b.RetryAfter, 1) {
			t.Fatalf("at %d: no admission RetryAfter %d later", now, b.RetryAfter)
		}
		if c := s; c.Admit(p, now+b.RetryAfter-1, 1) {
			t.Fatalf("at %d: an admission before RetryAfter %d", now, b.RetryAfter)
		}
	}
	if b.Reset > 0 {
		if got := admitsInARow(s, p, now+b.Reset); got != b.Limit {
			t.Fatalf("at %d: %d admissions Reset %d later, want Limit %d", now, got, b.Reset, b.Limit)
		}
		if got := admitsInARow(s, p, now+b.Reset-1); got >= b.Limit {
			t.Fatalf("at %d: %d admissions before Reset %d", now, got, b.Reset)
		}
	} else if b.Remaining != b.Limit {
		t.Fatalf("at %d: Reset 0 with Remaining %d of %d", now, b.Remaining, b.Limit)
	}
}
