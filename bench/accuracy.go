package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/model"
	"github.com/xdplimit/xdplimit/pktgen"
)

type queueAccuracy struct {
	alg, limit string
	cpus       int
	admitted   float64
	// expected is what an independent reference admits of the flood as
	// it was offered (refName says which): never the datapath's own model.
	expected float64
	refName  string
	// For the sliding window: the most packets admitted in one
	// window-long interval of the flood, and its limit; the documented
	// bound is twice the limit (docs/policy.md).
	worst, limitN uint64
	offered       uint64
	elapsed       time.Duration
	busy          float64 // share of the flood's span the sending threads ran
	err           string
}

func (q queueAccuracy) ratio() float64 {
	if q.expected == 0 {
		return 0
	}
	return q.admitted / q.expected
}

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

type accuracyResults struct {
	Queues        []queueAccuracy
	Count         uint64
	SWLimit       uint64
	SWWindow      time.Duration
	SWTraces      []slidingTrace
	SWTraceLength time.Duration
}

// accuracyBench measures how many packets a flooding source gets through
// against what its limit allows, on one queue and on two, and the sliding
// window's decisions against an exact sliding log.
func accuracyBench(e *env, quick bool) (*accuracyResults, error) {
	res := &accuracyResults{Count: 8_000_000}
	if quick {
		res.Count = 4_000_000
	}
	if err := slidingVsLog(e, res, quick); err != nil {
		return res, err
	}
	return res, queueBench(e, res)
}

// queueBench floods one source through xdplimit on a veth, from one CPU
// (one receive queue) and from two (two queues, so two CPUs update the same
// state at once), with the real clock, and compares what was admitted with
// what the limit allows over the time the flood lasted.
func queueBench(e *env, res *accuracyResults) error {
	v, err := e.vethPair("xba0", "xba1", 14)
	if err != nil {
		return err
	}
	frame := pktgen.SetMACs(pktgen.UDP4(v.Addr, v.PeerAddr, 40000, 9, 18), v.MAC, v.PeerMAC)
	pair := &vethPair{v: v, frame: frame}
	g, err := pktgen.Open(pktgen.Config{Timeout: 60 * time.Second})
	if err != nil {
		return err
	}
	defer g.Close()

	// Bursts and windows of one second: long against the sampling of the
	// flood's timeline (0.5 ms), which decides how exactly the reference
	// knows where the windows' edges fell in the flood. Each reference is
	// independent of the datapath and of its Go mirror (model.State): the
	// token bucket's is burst + rate × the measured span, the fixed
	// window's the limit (or what was offered, if less) per window the
	// flood reached, the sliding window's an exact sliding log
	// (model.ExactLog) over the flood.
	const limit, window = 100000, int64(time.Second)
	cases := []struct {
		alg, limit string
		ref        reference
	}{
		{"token bucket", "{algorithm: token_bucket, rate: 100000/s, burst: 100000}", tbReference(limit, limit)},
		{"fixed window", "{algorithm: fixed_window, packets: 100000, window: 1s}", fwReference(limit, window)},
		{"sliding window", "{algorithm: sliding_window, packets: 100000, window: 1s}", exactReference(limit, window)},
	}
	for _, cpus := range [][]int{{0}, {0, 1}} {
		if len(cpus) > runtime.NumCPU() {
			continue
		}
		for _, c := range cases {
			q := queueAccuracy{alg: c.alg, limit: c.limit, cpus: len(cpus), refName: c.ref.name}
			err = try(func() error {
				l, err := loadLimiter(maps.Options{Clock: maps.ClockCoarse}, oneRule(c.limit), nil)
				if err != nil {
					return err
				}
				defer l.Close()
				lk, err := pair.attachProg(l.Program())
				if err != nil {
					return err
				}
				defer lk.Close()
				ctx, cancel := context.WithTimeout(e.ctx, 90*time.Second)
				defer cancel()
				stop := make(chan struct{})
				timeline := watchOffered(l, stop)
				r, err := g.Send(ctx, v.NS.Path(), v.Name, frame, res.Count, cpus...)
				if err != nil {
					close(stop)
					return err
				}
				_, err = pair.settle()
				close(stop)
				if err != nil {
					return err
				}
				tl := <-timeline
				st, err := l.RuleStats()
				if err != nil {
					return err
				}
				q.admitted = float64(st[0].Verdicts[maps.VerdictPass].Packets)
				q.offered = st[0].Verdicts[maps.VerdictPass].Packets + st[0].Verdicts[maps.VerdictDrop].Packets
				if len(tl) < 2 || tl[0].n > q.offered/100 {
					return fmt.Errorf("the counters were sampled %d times during the flood: no timeline of it", len(tl))
				}
				// The first sample is late by up to one poll: the
				// packets before it are spread over the poll before.
				tl = append([]offeredAt{{t: tl[0].t - int64(500*time.Microsecond)}}, tl...)
				if last := tl[len(tl)-1]; last.n != q.offered {
					tl = append(tl, offeredAt{t: last.t + int64(500*time.Microsecond), n: q.offered, pass: uint64(q.admitted)})
				}
				// These limits are long enough for the coarse clock
				// (maps decides per level; see needsFineClock).
				q.expected = c.ref.admits(tl, coarseClock(tl))
				if c.ref.window > 0 {
					q.worst, q.limitN = worstWindow(tl, c.ref.window), c.ref.limit
				}
				q.elapsed = time.Duration(tl[len(tl)-1].t - tl[0].t)
				q.busy = r.CPUTime.Seconds() / (float64(len(cpus)) * q.elapsed.Seconds())
				return nil
			})
			q.err = errString(err)
			e.Logf("accuracy: %s on %d queue(s): admitted %.0f, %s %.0f (%.4f), worst window %d, offered %d in %v, busy %.2f %s",
				c.alg, len(cpus), q.admitted, q.refName, q.expected, q.ratio(), q.worst, q.offered, q.elapsed.Round(time.Millisecond), q.busy, q.err)
			res.Queues = append(res.Queues, q)
		}
	}
	return nil
}

// offeredAt is how many packets the limiter had judged, and admitted, at a
// time (CLOCK_MONOTONIC ns).
type offeredAt struct {
	t      int64
	n      uint64
	pass   uint64
	coarse int64 // CLOCK_MONOTONIC_COARSE at the sample, 0 when not read
}

// watchOffered samples the limiter's rule counters every 0.5 ms from a
// goroutine until stop is closed, and then sends the samples. The flood's
// timeline is far from even: it starts well after Send is called (the
// sending threads enter the namespace, the first test-run call may wait
// for an RCU grace period), the threads are preempted by other work, and
// one finishes its share before the other. A window boundary in such a gap
// would have counted a whole window the flood never filled.
func watchOffered(l *maps.Limiter, stop <-chan struct{}) <-chan []offeredAt {
	c := make(chan []offeredAt, 1)
	go func() {
		var out []offeredAt
		tick := time.NewTicker(500 * time.Microsecond)
		defer tick.Stop()
		for {
			st, err := l.RuleStats()
			if err == nil && len(st) > 0 {
				pass := st[0].Verdicts[maps.VerdictPass].Packets
				n := pass + st[0].Verdicts[maps.VerdictDrop].Packets
				if len(out) == 0 || n != out[len(out)-1].n {
					out = append(out, offeredAt{t: monoNow(), n: n, pass: pass, coarse: coarseNow()})
				}
			}
			select {
			case <-stop:
				c <- out
				return
			case <-tick.C:
			}
		}
	}()
	return c
}

func coarseNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC_COARSE, &ts)
	return ts.Nano()
}

// coarseClock maps a CLOCK_MONOTONIC time to what the datapath's coarse
// clock read then: the time of the last tick. The ticks' phase comes from
// the coarse readings of the samples (the median of their offsets in the
// tick). Up to a tick late, the coarse clock moves a window's edge by that
// much, which at a few Mpps is thousands of packets in a window's count.
func coarseClock(tl []offeredAt) func(int64) int64 {
	tick := int64(maps.CoarseTick())
	var phases []int64
	for _, s := range tl {
		if s.coarse > 0 {
			phases = append(phases, s.coarse%tick)
		}
	}
	if len(phases) == 0 {
		return func(t int64) int64 { return t }
	}
	slices.Sort(phases)
	phase := phases[len(phases)/2]
	return func(t int64) int64 { return phase + (t-phase)/tick*tick }
}

// reference is what a limit admits of a flood as it was offered, computed
// without the datapath or its Go mirror.
type reference struct {
	name string
	// For window limits, the limit and the window (ns); 0 otherwise.
	limit  uint64
	window int64
	admits func(tl []offeredAt, clock func(int64) int64) float64
}

// tbReference: a token bucket admits its burst plus rate × the time the
// flood lasted, from the first sample to the last (the timeline's ends are
// padded by one poll on either side, see queueBench), while the flood
// stays above the rate and its gaps are shorter than burst/rate.
func tbReference(rate, burst float64) reference {
	return reference{name: "burst + rate × span", admits: func(tl []offeredAt, _ func(int64) int64) float64 {
		if len(tl) < 2 {
			return 0
		}
		return burst + rate*float64(tl[len(tl)-1].t-tl[0].t)/1e9
	}}
}

// fwReference: a fixed window admits, in each window aligned on the
// datapath's clock, the limit or what was offered in it if that is less.
func fwReference(limit uint64, window int64) reference {
	return reference{name: "limit per window reached", admits: func(tl []offeredAt, clock func(int64) int64) float64 {
		var admitted, inWindow uint64
		cur := int64(-1)
		eachPacket(tl, clock, func(t int64) {
			if w := t / window; w != cur {
				cur, inWindow = w, 0
			}
			if inWindow < limit {
				inWindow++
				admitted++
			}
		})
		return float64(admitted)
	}}
}

// exactReference: an exact sliding window (model.ExactLog, the reference
// the sliding-window approximation is documented against) run over the
// flood, on the datapath's clock.
func exactReference(limit uint64, window int64) reference {
	return reference{name: "exact sliding log", limit: limit, window: window,
		admits: func(tl []offeredAt, clock func(int64) int64) float64 {
			log := model.NewExactLog(uint64(window), int(limit))
			var admitted uint64
			eachPacket(tl, clock, func(t int64) {
				if log.Admit(uint64(t)) {
					admitted++
				}
			})
			return float64(admitted)
		}}
}

// eachPacket calls fn with the time of every packet of the timeline, the
// packets of each sample interval spread evenly across it, read on clock
// (times must not decrease).
func eachPacket(tl []offeredAt, clock func(int64) int64, fn func(t int64)) {
	for i := 1; i < len(tl); i++ {
		a, b := tl[i-1], tl[i]
		n := b.n - a.n
		step := float64(b.t-a.t) / float64(n)
		for k := range n {
			fn(clock(a.t + int64(float64(k+1)*step)))
		}
	}
}

// worstWindow is the most packets the limiter admitted between two samples
// at most window apart: a count that certainly fell within one
// window-long interval (the true worst may exceed it by what one poll
// interval admitted).
func worstWindow(tl []offeredAt, window int64) uint64 {
	var worst uint64
	i := 0
	for j := range tl {
		for tl[j].t-tl[i].t > window {
			i++
		}
		worst = max(worst, tl[j].pass-tl[i].pass)
	}
	return worst
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

func (q queueAccuracy) String() string {
	return fmt.Sprintf("%s/%d", q.alg, q.cpus)
}
