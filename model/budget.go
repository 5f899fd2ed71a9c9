// SPDX-License-Identifier: Apache-2.0

package model

import "math"

// Budget is what a level's state allows a key at one time, one unit (a
// packet, or a byte of a byte limit) at a time, in the terms of the IETF
// RateLimit header fields and of HTTP's Retry-After. Every figure is what
// Admit would decide: Remaining is how many unit admissions in a row
// Admit grants at that time, RetryAfter and Reset the earliest times it
// grants one, and all of them.
type Budget struct {
	// Limit is Remaining for a key without state: a token bucket's burst
	// (as its integer arithmetic holds it), a window's count (less a fleet
	// window's reserve), a log's length.
	Limit uint64
	// Remaining is how many units are admitted now.
	Remaining uint64
	// RetryAfter is the time until a unit is admitted, in ns: 0 while
	// Remaining is not.
	RetryAfter uint64
	// Reset is the time until Remaining is Limit again, in ns.
	Reset uint64
}

// Budget is what the state allows at now (ns) under p.
func (s State) Budget(p Params, now uint64) Budget {
	b := Budget{Limit: State{}.remaining(p, now), Remaining: s.remaining(p, now)}
	if b.Remaining == 0 {
		b.RetryAfter = s.until(p, now, 1)
	}
	if b.Remaining < b.Limit {
		b.Reset = s.until(p, now, b.Limit)
	}
	return b
}

// remaining counts the units admitted at now, one after another: from the
// algorithms' own arithmetic, or, for a log of at most LogMax entries, by
// admitting them.
func (s State) remaining(p Params, now uint64) uint64 {
	switch p.Algorithm {
	case AlgTokenBucket:
		inc := tbIncrement(p, 1)
		t := now << TimeShift
		d := max(s.A, t) - t
		if inc == 0 {
			return math.MaxUint64
		}
		if d > p.P2 {
			return 0
		}
		return (p.P2 - d) / inc
	case AlgFixedWindow:
		_, cnt, _, _ := s.fixedCount(p, now)
		return p.P2 - min(cnt, p.P2)
	case AlgSlidingWindow:
		est, ccnt, _, _ := s.slidingCount(p, now)
		return p.P2 - min(est+ccnt, p.P2)
	case AlgSlidingLog:
		var n uint64
		for n < LogMax && s.Admit(p, now, 1) {
			n++
		}
		return n
	}
	return 0
}

// until is the time after now, in ns, from which at least want units are
// admitted: remaining only grows as time passes without admissions, so
// a binary search over the time finds it. The bound is a time by which
// every algorithm has forgotten the state: a token bucket's tat, two
// windows.
func (s State) until(p Params, now, want uint64) uint64 {
	var hi uint64
	switch p.Algorithm {
	case AlgTokenBucket:
		hi = (max(s.A, now<<TimeShift)-now<<TimeShift)>>TimeShift + 1
	default:
		hi = 2*p.P1 + 1
	}
	if s.remaining(p, now+hi) < want {
		return hi // a state no time frees (the reserve of a fleet window)
	}
	lo := uint64(0)
	for lo < hi {
		mid := lo + (hi-lo)/2
		if s.remaining(p, now+mid) >= want {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}
