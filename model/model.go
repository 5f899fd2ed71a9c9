// SPDX-License-Identifier: Apache-2.0

// Package model holds Go reference models of the datapath's limiter
// algorithms. They mirror bpf/limiters.h operation for operation, in the same
// integer arithmetic, so that a trace replayed through a model and through
// the BPF program (with injected time) yields the same verdicts. They also
// own the conversion from human limits (rate, burst, window) to the
// parameters the datapath stores, so the compiler and the tests share it.
// ExactLog mirrors nothing: it is the exact sliding window the datapath's
// approximations are measured against. Production (the compiler, replay),
// the benchmark program and the tests use this package.
package model

import (
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"time"
)

// These mirror enum xdpl_const in bpf/xdplimit_consts.h; maps/ checks at
// init that they agree with the generated constants.
const (
	AlgTokenBucket   = 1
	AlgFixedWindow   = 2
	AlgSlidingWindow = 3
	AlgSlidingLog    = 4

	TimeShift  = 4
	FPShift    = 16
	CountBits  = 40
	SeqBits    = 24
	SWTimeBits = 24
	CASTries   = 4

	countMask = 1<<CountBits - 1
	// A count times a sliding window's time fits 64 bits (fails to
	// compile otherwise).
	_       = uint(64 - CountBits - SWTimeBits)
	seqMask = 1<<SeqBits - 1

	// MaxWindowCount is the largest per-window limit a window counter holds.
	MaxWindowCount = countMask

	// MaxFrameBytes bounds the cost of one packet in byte-counting limits
	// (an XDP frame is at most a page; jumbo multi-buffer frames stay far
	// below this), so that cost * interval never overflows 64 bits.
	MaxFrameBytes = 1 << 17
)

// Params are one limiter level's datapath parameters (struct xdpl_level).
type Params struct {
	Algorithm uint8
	// token bucket: P1 = emission interval per unit in ns << FPShift,
	// P2 = tolerance in 1/16 ns. Windows: P1 = window ns, P2 = limit.
	P1, P2 uint64
	// P3: fixed_window's phase in ns, added to now before the window
	// index is taken (fleet levels align windows to the wall clock);
	// sliding_window's time shift (SlidingShift).
	P3 uint64
	// Reserve: what a fleet fixed window's count opens at (the share held
	// back for the other hosts until the first sync); 0 at host scope.
	Reserve uint64
}

// State is one state entry (struct xdpl_state). A sliding_log level's
// entry holds its log's id in A; the model holds the log itself in Log, by
// value, so that a copy of a State (a trial admission) is a copy of all of
// it.
type State struct {
	A, B uint64
	Log  Log
}

// TokenBucketParams converts "count units per per, burst units" to GCRA
// parameters, rounding the interval down (admitting at most 2^-16 ns per unit
// more than the exact rate) and the tolerance down. It is the authority on
// what the datapath can represent: the policy validator asks it.
func TokenBucketParams(count uint64, per time.Duration, burst uint64, bytes bool) (Params, error) {
	if count == 0 || per <= 0 || burst == 0 {
		return Params{}, fmt.Errorf("token bucket needs a positive rate and burst")
	}
	perNs := new(big.Int).SetInt64(int64(per))
	c := new(big.Int).SetUint64(count)
	interval := new(big.Int).Lsh(perNs, FPShift)
	interval.Quo(interval, c)
	if interval.Sign() == 0 {
		return Params{}, fmt.Errorf("rate %d per %v is beyond the datapath's resolution", count, per)
	}
	// cost * interval must fit 64 bits: cost is 1 for packets and up to
	// MaxFrameBytes for bytes.
	maxInterval := uint64(math.MaxUint64 >> 1)
	if bytes {
		maxInterval = math.MaxUint64 / MaxFrameBytes
	}
	if !interval.IsUint64() || interval.Uint64() > maxInterval {
		slowest := "one packet per 39 hours"
		if bytes {
			slowest = "1 byte per 2 seconds"
		}
		return Params{}, fmt.Errorf("rate %d per %v is slower than the datapath holds (%s)", count, per, slowest)
	}
	tau := new(big.Int).SetUint64(burst)
	tau.Mul(tau, perNs)
	tau.Lsh(tau, TimeShift)
	tau.Quo(tau, c)
	if !tau.IsUint64() || tau.Uint64() > MaxTolerance {
		return Params{}, fmt.Errorf("burst %d at %d per %v takes %v to refill; the datapath holds at most %v",
			burst, count, per, time.Duration(new(big.Int).Rsh(tau, TimeShift).Uint64()), time.Duration(MaxTolerance>>TimeShift))
	}
	return Params{Algorithm: AlgTokenBucket, P1: interval.Uint64(), P2: tau.Uint64()}, nil
}

// MaxTolerance is the longest burst, in time units, a token bucket holds:
// about 3.6 years, leaving room for uptime in tat without overflow.
const MaxTolerance = 1 << 60

// WindowParams gives the parameters of a fixed or sliding window.
func WindowParams(alg uint8, limit uint64, window time.Duration) (Params, error) {
	if limit == 0 || limit > MaxWindowCount {
		return Params{}, fmt.Errorf("window limit %d outside 1..%d", limit, uint64(MaxWindowCount))
	}
	if window <= 0 || window > 1<<46 {
		return Params{}, fmt.Errorf("window %v outside what the datapath holds", window)
	}
	p := Params{Algorithm: alg, P1: uint64(window), P2: limit}
	if alg == AlgSlidingWindow {
		p.P3 = SlidingShift(p.P1)
	}
	return p, nil
}

// SlidingShift is the time shift of a sliding window of w ns: the
// previous window's share is reckoned in units of 2^shift ns, so that the
// window has fewer than 2^SWTimeBits of them (exact to the ns up to ~16 ms,
// to 64 ns at 1 s, to ~0.3 ms at an hour).
func SlidingShift(w uint64) uint64 {
	return uint64(max(0, bits.Len64(w)-SWTimeBits))
}

// ToleranceNs is the token bucket's burst expressed as time, in ns.
func (p Params) ToleranceNs() uint64 { return p.P2 >> TimeShift }

// Admit decides one packet of the given cost at time now (ns) and updates
// the state as the datapath does. CAS always succeeds in the model (one
// thread), which is what the datapath converges to.
func (s *State) Admit(p Params, now, cost uint64) bool {
	switch p.Algorithm {
	case AlgTokenBucket:
		return s.tokenBucket(p, now, cost)
	case AlgFixedWindow:
		return s.fixedWindow(p, now, cost)
	case AlgSlidingWindow:
		return s.slidingWindow(p, now, cost)
	case AlgSlidingLog:
		return s.slidingLog(p, now, cost)
	}
	return false
}

func (s *State) tokenBucket(p Params, now, cost uint64) bool {
	t := now << TimeShift
	next := max(s.A, t) + tbIncrement(p, cost)
	if next-t > p.P2 {
		return false
	}
	s.A = next
	return true
}

// tbIncrement is what a packet of cost units adds to a token bucket's tat.
func tbIncrement(p Params, cost uint64) uint64 { return (cost * p.P1) >> (FPShift - TimeShift) }

// fixedCount is what fixed_window reads at now: the window's sequence, the
// count it holds (the reserve for a window it opens), whether it opens it,
// and its full index.
func (s *State) fixedCount(p Params, now uint64) (seq, cnt uint64, open bool, idx uint64) {
	idx = (now + p.P3) / p.P1
	seq = idx & seqMask
	d := (seq - s.A>>CountBits) & seqMask
	switch {
	case int64(idx-s.B) >= 1<<(SeqBits-1):
		open = true // stale entry: a new window
	case d == 0:
		cnt = s.A & countMask
	case d > seqMask>>1:
		seq = s.A >> CountBits
		cnt = s.A & countMask
	default:
		open = true
	}
	if open {
		cnt = p.Reserve
	}
	return seq, cnt, open, idx
}

func (s *State) fixedWindow(p Params, now, cost uint64) bool {
	if cost > p.P2 {
		return false
	}
	seq, cnt, open, idx := s.fixedCount(p, now)
	if cnt+cost > p.P2 {
		return false
	}
	s.A = seq<<CountBits | (cnt + cost)
	if open {
		s.B = idx
	}
	return true
}

// slidingCount is what sliding_window reads at now: the previous window's
// weighted estimate, the current window's count, the word that holds it
// and its sequence.
func (s *State) slidingCount(p Params, now uint64) (est, ccnt uint64, cur *uint64, seq uint64) {
	w := p.P1
	idx := now / w
	el := now - idx*w
	slot := func(i uint64) *uint64 {
		if i&1 == 1 {
			return &s.B
		}
		return &s.A
	}
	if *slot(idx + 1)>>CountBits == (idx+1)&seqMask {
		idx++
		el = 0
	}
	seq = idx & seqMask
	cur = slot(idx)
	pw := *slot(idx + 1)
	var pcnt uint64
	if pw>>CountBits == (idx-1)&seqMask {
		pcnt = pw & countMask
	}
	// The previous window's count times the share of it still inside
	// the sliding window, rounded down: pcnt * left / wq exactly, both
	// times in units of 2^P3 ns (the datapath compares the product
	// without dividing).
	left, wq := (w-el)>>p.P3, w>>p.P3
	est = pcnt * left / wq
	if *cur>>CountBits == seq {
		ccnt = *cur & countMask
	}
	return est, ccnt, cur, seq
}

func (s *State) slidingWindow(p Params, now, cost uint64) bool {
	if cost > p.P2 {
		return false
	}
	est, ccnt, cur, seq := s.slidingCount(p, now)
	if est+ccnt+cost > p.P2 {
		return false
	}
	*cur = seq<<CountBits | (ccnt + cost)
	return true
}
