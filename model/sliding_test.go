// SPDX-License-Identifier: Apache-2.0

package model

import (
	"math/big"
	"math/rand/v2"
	"testing"
	"time"
)

// TestSlidingShift: a window has fewer than 2^SWTimeBits units of 2^shift
// ns and, when it needed a shift, at least half as many (no coarser than
// it must be); windows up to 2^SWTimeBits ns keep the ns.
func TestSlidingShift(t *testing.T) {
	for _, w := range []uint64{1, 1000, 1<<SWTimeBits - 1, 1 << SWTimeBits, 1e9, 3600e9, 1 << 46} {
		s := SlidingShift(w)
		if w>>s >= 1<<SWTimeBits || (s > 0 && w>>s < 1<<(SWTimeBits-1)) {
			t.Errorf("window %d ns: shift %d leaves %d units", w, s, w>>s)
		}
		if w < 1<<SWTimeBits && s != 0 {
			t.Errorf("window %d ns: shift %d, want 0", w, s)
		}
	}
	for _, w := range []time.Duration{1, time.Second, time.Hour} {
		p, err := WindowParams(AlgSlidingWindow, 100, w)
		if err != nil || p.P3 != SlidingShift(uint64(w)) {
			t.Errorf("%v window: %+v %v, want shift %d", w, p, err, SlidingShift(uint64(w)))
		}
	}
}

// TestSlidingEstimate: the previous window's share is the exact rational
// one rounded down when the window keeps the ns, and within a count of
// pcnt / 2^(SWTimeBits-1) + 1 of it when it is reckoned in 2^shift ns.
func TestSlidingEstimate(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for i := 0; i < 20000; i++ {
		w := 1 + r.Uint64N(1<<(1+r.IntN(46)))
		pcnt := r.Uint64N(MaxWindowCount + 1)
		if i%2 == 0 {
			pcnt = r.Uint64N(1000)
		}
		p, err := WindowParams(AlgSlidingWindow, MaxWindowCount, time.Duration(w))
		if err != nil {
			t.Fatal(err)
		}
		idx := 1000 + r.Uint64N(1000)
		el := r.Uint64N(w)
		s := State{}
		prev := (idx - 1) & seqMask << CountBits
		if idx&1 == 1 {
			s.A = prev | pcnt
		} else {
			s.B = prev | pcnt
		}
		est, _, _, _ := s.slidingCount(p, idx*w+el)
		exact := new(big.Int).Mul(new(big.Int).SetUint64(pcnt), new(big.Int).SetUint64(w-el))
		exact.Quo(exact, new(big.Int).SetUint64(w))
		x := exact.Uint64()
		slack := uint64(0)
		if p.P3 > 0 {
			slack = pcnt>>(SWTimeBits-1) + 1
		}
		if est > x+slack || est+slack < x {
			t.Fatalf("window %d, shift %d, pcnt %d, el %d: estimate %d, exact %d", w, p.P3, pcnt, el, est, x)
		}
	}
}
