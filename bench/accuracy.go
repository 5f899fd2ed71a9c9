// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"runtime"
	"slices"
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
			q.err = errString(try(func() error { return q.measure(e, g, pair, c.ref, res.Count, cpus) }))
			e.Logf("accuracy: %s on %d queue(s): admitted %.0f, %s %.0f (%.4f), worst window %d, offered %d in %v, busy %.2f %s",
				c.alg, len(cpus), q.admitted, q.refName, q.expected, q.ratio(), q.worst, q.offered, q.elapsed.Round(time.Millisecond), q.busy, q.err)
			res.Queues = append(res.Queues, q)
		}
	}
	return nil
}

// measure floods pair with count frames from cpus through xdplimit with
// q's limit, and sets what it admitted against what ref admits of the
// flood as the limiter saw it offered.
func (q *queueAccuracy) measure(e *env, g *pktgen.Generator, pair *vethPair, ref reference, count uint64, cpus []int) error {
	l, detach, err := pair.attachLimiter(maps.Options{Clock: maps.ClockCoarse}, oneRule(q.limit))
	if err != nil {
		return err
	}
	defer detach()
	r, tl, err := floodWatched(e, g, pair, l, count, cpus)
	if err != nil {
		return err
	}
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
	q.expected = ref.admits(tl, coarseClock(tl))
	if ref.window > 0 {
		q.worst, q.limitN = worstWindow(tl, ref.window), ref.limit
	}
	q.elapsed = time.Duration(tl[len(tl)-1].t - tl[0].t)
	q.busy = r.CPUTime.Seconds() / (float64(len(cpus)) * q.elapsed.Seconds())
	return nil
}

// floodWatched sends count of pair's frames from cpus, l's counters
// sampled all along, and returns the send and the timeline of what l was
// offered once the receiver has taken every frame in.
func floodWatched(e *env, g *pktgen.Generator, pair *vethPair, l *maps.Limiter, count uint64, cpus []int) (pktgen.Result, []offeredAt, error) {
	ctx, cancel := context.WithTimeout(e.ctx, 90*time.Second)
	defer cancel()
	stop := make(chan struct{})
	timeline := watchOffered(l, stop)
	r, err := g.Send(ctx, pair.v.NS.Path(), pair.v.Name, pair.frame, count, cpus...)
	if err != nil {
		close(stop)
		return r, nil, err
	}
	_, err = pair.settle()
	close(stop)
	if err != nil {
		return r, nil, err
	}
	return r, <-timeline, nil
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

func (q queueAccuracy) String() string {
	return fmt.Sprintf("%s/%d", q.alg, q.cpus)
}
