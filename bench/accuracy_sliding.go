// SPDX-License-Identifier: Apache-2.0

package main

import (
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"time"

	"github.com/xdplimit/xdplimit/model"
)

// The sliding window against an exact sliding log, in Go: the
// datapath's arithmetic (model.State) on traces far longer than a flood
// could offer in the section's time.

type slidingTrace struct {
	name, rates string
	alg         string // the limiter under test: sliding_window or sliding_log
	limit       uint64
	sources     int
	packets     uint64
	// Packets the datapath's sliding window decided otherwise than an
	// exact sliding window over the same history would have: admitted
	// with the window already full (over), or refused with room in it
	// (under).
	over, under uint64
	// The most packets the exact window held after an admission: the
	// limit, unless an admission went over it.
	maxHeld int
	// Two limiters run independently on the trace, each on its own
	// decisions: what each admitted in total.
	admitModel, admitLog uint64
}

func (s slidingTrace) wrongShare() float64 {
	if s.packets == 0 {
		return 0
	}
	return float64(s.over+s.under) / float64(s.packets)
}

// slidingVsLog runs Poisson traces through the datapath's sliding window
// (model.State, which mirrors the BPF code operation for operation; the
// datapath tests hold them to identical verdicts), per source, and at each
// packet asks an exact sliding log holding the same admitted packets what
// it would have decided: the share decided differently is the
// approximation's error, as Cloudflare measured theirs (the approximate
// count against the exact one, on the same requests). It also runs an
// independent exact sliding-window limiter on the trace and compares the
// totals admitted: two limiters on their own decisions admit different
// packets of an over-limit source (their phases drift apart), so a
// packet-by-packet comparison of those says little.
// The sliding log runs the same traces at the most it holds (64 packets
// per window): exact, it must never decide differently.
func slidingVsLog(e *env, res *accuracyResults, quick bool) error {
	const limit = 100
	window := time.Second
	res.SWLimit, res.SWWindow = limit, window
	res.SWTraceLength = 60 * time.Second
	scale := uint64(1)
	if quick {
		scale = 40
	}
	traces := []traceSpec{
		// Like real traffic, sources below and above their limit, most
		// not near it: rates spread evenly on a log scale over two decades
		// around the limit. Cloudflare's 0.003% came from 400M requests.
		{"mixed", "log-uniform, 0.1× to 10× the limit", 400_000_000 / scale,
			func(r *rand.Rand) float64 { return math.Pow(10, -1+2*r.Float64()) }},
		{"around the limit", "uniform, 0.5× to 2× the limit", 100_000_000 / scale,
			func(r *rand.Rand) float64 { return 0.5 + 1.5*r.Float64() }},
		{"at the limit", "exactly the limit", 100_000_000 / scale,
			func(r *rand.Rand) float64 { return 1 }},
	}
	sw, err := model.WindowParams(model.AlgSlidingWindow, limit, window)
	if err != nil {
		return err
	}
	sl, err := model.SlidingLogParams(model.LogMax, window)
	if err != nil {
		return err
	}
	for li, lim := range []struct {
		alg string
		p   model.Params
	}{{"sliding_window", sw}, {"sliding_log", sl}} {
		for ti, tr := range traces {
			if err := slidingRow(e, res, lim.alg, lim.p, window, uint64(li*len(traces)+ti), tr); err != nil {
				return err
			}
		}
	}
	return nil
}

// traceSpec is one kind of trace of the sliding-window table.
type traceSpec struct {
	name, rates string
	packets     uint64
	rate        func(r *rand.Rand) float64 // per-source rate as a multiple of the limit
}

// slidingRow runs one trace through one limiter (params p) on every CPU and
// adds its row to the table.
func slidingRow(e *env, res *accuracyResults, alg string, p model.Params, window time.Duration, seed uint64, tr traceSpec) error {
	limit := p.P2
	e.Logf("accuracy: %s vs exact log, %s trace, %d packets", alg, tr.name, tr.packets)
	workers := max(1, runtime.NumCPU())
	parts := make([]slidingTrace, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			parts[w] = slidingPart(p, limit, window, res.SWTraceLength, tr.packets/uint64(workers),
				rand.New(rand.NewPCG(seed, uint64(w))), tr.rate)
		}()
	}
	wg.Wait()
	t := slidingTrace{name: tr.name, rates: tr.rates, alg: alg, limit: limit}
	for _, s := range parts {
		t.sources += s.sources
		t.packets += s.packets
		t.over += s.over
		t.under += s.under
		t.admitModel += s.admitModel
		t.admitLog += s.admitLog
		t.maxHeld = max(t.maxHeld, s.maxHeld)
	}
	e.Logf("accuracy: %s: %d sources, %d packets, %d decided differently (%.5f%%)", t.name, t.sources, t.packets, t.over+t.under, 100*t.wrongShare())
	res.SWTraces = append(res.SWTraces, t)
	return e.ctx.Err()
}

func slidingPart(p model.Params, limit uint64, window, length time.Duration, packets uint64, r *rand.Rand, rate func(*rand.Rand) float64) slidingTrace {
	var t slidingTrace
	shared := model.NewExactLog(uint64(window), int(limit)) // the window's admitted packets
	exact := model.NewExactLog(uint64(window), int(limit))  // an exact limiter of its own
	perSec := float64(limit) / window.Seconds()
	for t.packets < packets {
		t.sources++
		lambda := rate(r) * perSec // packets per second
		var st model.State
		shared.Reset()
		exact.Reset()
		// Each source starts at a random phase of the window grid, far from
		// time zero like a real clock.
		now := uint64(1e15) + r.Uint64N(uint64(window))
		end := now + uint64(length)
		for {
			now += uint64(r.ExpFloat64() / lambda * 1e9)
			if now >= end {
				break
			}
			held := shared.Count(now)
			would := held < int(limit)
			m := st.Admit(p, now, 1)
			t.packets++
			switch {
			case m && !would:
				t.over++
			case !m && would:
				t.under++
			}
			if m {
				t.maxHeld = max(t.maxHeld, held+1)
				shared.Add(now)
				t.admitModel++
			}
			if exact.Admit(now) {
				t.admitLog++
			}
		}
	}
	return t
}
