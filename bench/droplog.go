// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xdplimit/xdplimit/compiler"
	"github.com/xdplimit/xdplimit/droplog"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/metrics"
	"github.com/xdplimit/xdplimit/pktgen"
)

// The drop log and top under a flood (docs/logging.md): how many of the
// samples the policy's rate asks for reach each reader of the drop ring
// when a paced flood from 64k sources is dropped, read as the attach
// process (droplog.Logger every droplog.PollInterval) and `xdplimit top`
// (metrics.DropReader: the ring read every metrics.DropPoll, handed over
// every metrics.TopInterval) read it, and whether
// the log's per-second cap holds meanwhile.

const (
	dropLogRate    = 2e6 // frames per second asked of the generator
	dropLogFlood   = 10 * time.Second
	dropLogOneIn   = 64   // the policy's sample: 1/64
	dropLogCap     = 1000 // the policy's max_per_second, low enough to be exercised
	dropLogMinHits = 0.9  // the target: share of the asked samples that reach each reader
)

// dropLogPolicy drops every UDP packet of the flood but one a second (a
// global limit, so that no source table sits in the measurement) and logs
// the drops.
var dropLogPolicy = fmt.Sprintf(`rules:
  - name: flood
    match: {protocol: udp}
    key: global
    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}
log: {sample: 1/%d, max_per_second: %d}
`, dropLogOneIn, dropLogCap)

// dropLogReader is what one reader of the ring got, over the runs.
type dropLogReader struct {
	reached  sample // samples that reached it
	coverage sample // reached / asked
	lost     sample // overwritten in the ring before it read them
}

type dropLogResults struct {
	Rate     float64       // frames per second asked of the generator
	Flood    time.Duration // each run's flood
	Reps     int
	Datapath uint32  // the datapath samples one in Datapath drops
	Keep     float64 // the log keeps a sample with this probability
	Cap      uint32  // max_per_second
	CPUs     int

	mpps, cpuMpps sample // frames the receiver took in, per second of the send and per CPU-second
	drops         sample // drops the datapath counted
	asked         sample // drops / (Datapath / Keep)
	askedPerSec   sample // asked per second of the send
	written       sample // samples the datapath wrote to the ring (top's reader counts them)

	Log, Top dropLogReader
	// The log's own figures: drop lines and summary lines written,
	// samples suppressed by reason, the most drop lines in a second.
	lines, summaries, rateCap, backlog, peak sample

	errs       []string
	LoadBefore string
	LoadAfter  string
	Duration   time.Duration
}

// oneIn is N: one sample asked per N drops.
func (r *dropLogResults) oneIn() float64 { return float64(r.Datapath) / r.Keep }

// asked is the samples the configured rate asks for out of drops: the
// datapath samples one in datapath, the log keeps each with probability
// keep (compiler.SampleOneIn splits the policy's one in N so).
func asked(drops uint64, datapath uint32, keep float64) float64 {
	if datapath == 0 {
		return 0
	}
	return float64(drops) * keep / float64(datapath)
}

// coverage is the share of the asked samples that reached a reader (0
// when none were asked).
func coverage(reached, asked float64) float64 {
	if asked <= 0 {
		return 0
	}
	return reached / asked
}

// dropLogBench floods a veth from 64k sequential sources at dropLogRate for
// dropLogFlood into the limiter with dropLogPolicy, while the drop log and
// a top-like reader read the ring.
func dropLogBench(e *env, quick bool) (*dropLogResults, error) {
	res := &dropLogResults{Rate: dropLogRate, Flood: dropLogFlood, Reps: 3, CPUs: runtime.NumCPU(), LoadBefore: loadavg()}
	if quick {
		res.Flood, res.Reps = 5*time.Second, 2
	}
	start := time.Now()
	defer func() { res.LoadAfter, res.Duration = loadavg(), time.Since(start) }()

	img, pol, err := compilePolicy(dropLogPolicy, nil)
	if err != nil {
		return res, err
	}
	res.Datapath, res.Keep = compiler.SampleOneIn(pol.Log)
	res.Cap = pol.Log.RateCap()

	v, err := e.vethPair("xbd0", "xbd1", 19)
	if err != nil {
		return res, err
	}
	p := &vethPair{v: v, frame: pktgen.SetMACs(pktgen.UDP4(v.Addr, v.PeerAddr, 40000, 9, 18), v.MAC, v.PeerMAC)}
	// The flood stops when its time is over; the generator's timeout, at
	// twice that, is the hard bound, and so is a count 10% above the rate
	// times the time.
	g, err := pktgen.Open(pktgen.Config{Timeout: 2 * res.Flood, Sources: macroScenarios[1].sources})
	if err != nil {
		return res, err
	}
	defer g.Close()
	if err := g.SetRate(res.Rate); err != nil {
		return res, err
	}
	count := uint64(res.Rate * res.Flood.Seconds() * 1.1)
	for range res.Reps {
		if err := e.ctx.Err(); err != nil {
			return res, err
		}
		if err := dropLogRun(e, g, p, img, res, count); err != nil {
			e.Logf("droplog: %v", err)
			res.errs = append(res.errs, errString(err))
		}
	}
	return res, nil
}

func dropLogRun(e *env, g *pktgen.Generator, p *vethPair, img *maps.Image, res *dropLogResults, count uint64) (err error) {
	l, err := loadImage(maps.Options{Clock: maps.ClockCoarse}, img)
	if err != nil {
		return err
	}
	defer l.Close()
	lk, err := p.attachProg(l.Program())
	if err != nil {
		return err
	}
	defer lk.Close()
	iface := p.v.PeerName
	before, err := metrics.Read(iface, l)
	if err != nil {
		return err
	}
	rd, err := startDropReaders(e.ctx, iface, l, res)
	if err != nil {
		return err
	}
	defer rd.stop()

	r, received, softirqd, err := p.floodFor(e, g, count, res.Flood)
	if err != nil {
		return err
	}
	if err := rd.afterFlood(); err != nil {
		return err
	}
	after, err := metrics.Read(iface, l)
	if err != nil {
		return err
	}
	suppressed, err := suppressedBy(rd.m)
	if err != nil {
		return err
	}
	drops := metrics.TotalDrops(before, after)
	cpu := r.CPUTime + softirqd
	if received == 0 || drops == 0 || r.Elapsed <= 0 || cpu <= 0 {
		return fmt.Errorf("nothing dropped (sent %d, received %d, dropped %d)", r.Sent, received, drops)
	}
	res.record(e, r, received, cpu, drops, suppressed, rd)
	return nil
}

// dropReaders are the drop ring's two readers, as production runs them:
// the log, and top's.
type dropReaders struct {
	m        *droplog.Metrics
	out      *lineCounter
	closeLog func() error

	cancel                 context.CancelFunc
	floodOver              chan struct{}
	logErr, topErr         error
	topSamples, topWritten uint64
	logDone, topDone       sync.WaitGroup
}

func startDropReaders(ctx context.Context, iface string, l *maps.Limiter, res *dropLogResults) (*dropReaders, error) {
	rd := &dropReaders{m: droplog.NewMetrics(iface), out: &lineCounter{}, floodOver: make(chan struct{})}
	logger, err := droplog.New(iface, l, droplog.Settings{Keep: res.Keep, MaxPerSecond: res.Cap}, rd.out, nil, rd.m, nil, nil)
	if err != nil {
		return nil, err
	}
	rd.closeLog = sync.OnceValue(logger.Close)
	top, err := metrics.NewDropReader(l)
	if err != nil {
		rd.closeLog()
		return nil, err
	}
	ctx, rd.cancel = context.WithCancel(ctx)
	rd.logDone.Go(func() { rd.logErr = logger.Run(ctx, droplog.PollInterval) })
	rd.topDone.Go(func() { rd.topSamples, rd.topWritten, rd.topErr = readLikeTop(ctx, top, rd.floodOver) })
	return rd, nil
}

// stop ends both readers, then the log; on every path.
func (rd *dropReaders) stop() {
	rd.cancel()
	rd.logDone.Wait()
	rd.topDone.Wait()
	rd.closeLog()
}

// afterFlood lets the readers finish: top's reader ends at its first
// redraw after the flood, then the log's close takes what it has not read
// yet.
func (rd *dropReaders) afterFlood() error {
	close(rd.floodOver)
	rd.topDone.Wait()
	rd.cancel()
	rd.logDone.Wait()
	return errors.Join(rd.logErr, rd.topErr, rd.closeLog())
}

// record adds one flood's figures to the results.
func (res *dropLogResults) record(e *env, r pktgen.Result, received uint64, cpu time.Duration, drops uint64, suppressed map[string]float64, rd *dropReaders) {
	want := asked(drops, res.Datapath, res.Keep)
	lines, summaries, peak := rd.out.counts()
	topSamples, topWritten := rd.topSamples, rd.topWritten
	// Every sample the log read is a line or a suppression; only the
	// ring's overwrites never reached it.
	logReached := float64(lines) + suppressed[droplog.ReasonRate] + suppressed[droplog.ReasonBacklog] + suppressed[droplog.ReasonError]
	res.mpps = append(res.mpps, float64(received)/r.Elapsed.Seconds()/1e6)
	res.cpuMpps = append(res.cpuMpps, float64(received)/cpu.Seconds()/1e6)
	res.drops = append(res.drops, float64(drops))
	res.asked = append(res.asked, want)
	res.askedPerSec = append(res.askedPerSec, want/r.Elapsed.Seconds())
	res.written = append(res.written, float64(topWritten))
	res.Log.add(logReached, want, suppressed[droplog.ReasonRing])
	res.Top.add(float64(topSamples), want, float64(topWritten-topSamples))
	res.lines = append(res.lines, float64(lines))
	res.summaries = append(res.summaries, float64(summaries))
	res.rateCap = append(res.rateCap, suppressed[droplog.ReasonRate])
	res.backlog = append(res.backlog, suppressed[droplog.ReasonBacklog])
	res.peak = append(res.peak, float64(peak))
	e.Logf("droplog: %.3f Mpps, %.3f per CPU-s (sent %d in %v, received %d, dropped %d): %.0f samples asked, "+
		"the datapath wrote %d; the log reached %.0f (%s; %d lines, %.0f over the cap, %.0f overwritten, most %d lines in a second), "+
		"top %d (%s)", float64(received)/r.Elapsed.Seconds()/1e6, float64(received)/cpu.Seconds()/1e6, r.Sent,
		r.Elapsed.Round(time.Millisecond), received, drops, want, topWritten, logReached, pct(coverage(logReached, want)),
		lines, suppressed[droplog.ReasonRate], suppressed[droplog.ReasonRing], peak, topSamples, pct(coverage(float64(topSamples), want)))
}

func (d *dropLogReader) add(reached, asked, lost float64) {
	d.reached = append(d.reached, reached)
	d.coverage = append(d.coverage, coverage(reached, asked))
	d.lost = append(d.lost, lost)
}

// readLikeTop reads the ring as `xdplimit top` does, a redraw every
// metrics.TopInterval, until its first redraw that began after floodOver
// closed, or the end of ctx. It returns the samples read and those the
// datapath wrote meanwhile.
func readLikeTop(ctx context.Context, r *metrics.DropReader, floodOver <-chan struct{}) (samples, written uint64, err error) {
	tick := time.NewTicker(metrics.TopInterval)
	defer tick.Stop()
	for {
		last := false
		select {
		case <-floodOver:
			last = true
		default:
		}
		s, w, err := r.Next(ctx, tick.C)
		if err != nil {
			return samples, written, err
		}
		samples, written = samples+uint64(len(s)), written+w
		if last {
			return samples, written, nil
		}
	}
}

// suppressedBy reads the log's xdplimit_droplog_suppressed_total by reason.
func suppressedBy(m *droplog.Metrics) (map[string]float64, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(m); err != nil {
		return nil, err
	}
	mfs, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	by := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "xdplimit_droplog_suppressed_total" {
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, lp := range s.GetLabel() {
				if lp.GetName() == "reason" {
					by[lp.GetValue()] += s.GetCounter().GetValue()
				}
			}
		}
	}
	return by, nil
}

// lineCounter is the log's output: it counts drop lines by the second of
// their time (the logger's clock, the one its cap counts in) and summary
// lines, and keeps nothing else.
type lineCounter struct {
	mu        sync.Mutex
	perSecond map[int64]uint64
	lines     uint64
	summaries uint64
}

func (c *lineCounter) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for ln := range bytes.Lines(b) {
		var l struct {
			Event string    `json:"event"`
			Time  time.Time `json:"time"`
		}
		if err := json.Unmarshal(ln, &l); err != nil {
			return 0, fmt.Errorf("drop log line %q: %w", ln, err)
		}
		switch l.Event {
		case "drop":
			if c.perSecond == nil {
				c.perSecond = map[int64]uint64{}
			}
			c.perSecond[l.Time.Unix()]++
			c.lines++
		case "suppressed":
			c.summaries++
		default:
			return 0, fmt.Errorf("drop log line %q: unknown event", ln)
		}
	}
	return len(b), nil
}

// counts is the drop lines and summary lines written, and the most drop
// lines written in any one second.
func (c *lineCounter) counts() (lines, summaries, peak uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var per []uint64
	for _, n := range c.perSecond {
		per = append(per, n)
	}
	if len(per) > 0 {
		peak = slices.Max(per)
	}
	return c.lines, c.summaries, peak
}
