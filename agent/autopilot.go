// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xdplimit/xdplimit/autopilot"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/policy"
)

// The autopilot beside an attachment: it reads the datapath's samples of
// every packet, feeds them to an autopilot.Pilot, and puts the rules the
// pilot writes in force ahead of the policy's own (Agent.applyGenerated).
// The rules are kept in a state file so that a restarted attach process
// enforces them from its first moment and expires them on time.

const (
	// pilotRead is how often the rings are read: each CPU's holds
	// maps.TrafficRingSize samples, so at one in 64 a CPU may sample ~650
	// kpps before its ring wraps between two reads.
	pilotRead = 100 * time.Millisecond
	// pilotTick is the detection's interval: rates are judged per second.
	pilotTick = time.Second
)

type autopilotRunner struct {
	a   *Agent // its attachment, a.att, is set once attached
	log *slog.Logger
	m   *autopilot.Metrics

	mu     sync.Mutex
	cfg    *policy.Autopilot // nil: off
	pilot  *autopilot.Pilot  // kept across off and on: the rules restored at start live here
	cancel context.CancelFunc
	// runs are every run started, also those stopped without waiting:
	// all have ended before the maps they read close.
	runs sync.WaitGroup
}

func newAutopilotRunner(a *Agent, reg prometheus.Registerer) *autopilotRunner {
	r := &autopilotRunner{a: a, log: a.log, m: autopilot.NewMetrics(a.cfg.Interface)}
	if reg != nil {
		if err := reg.Register(r.m); err != nil {
			r.log.Warn("autopilot metrics unavailable", "err", err)
		}
	}
	return r
}

// liveConfig is the pilot's configuration from the policy's section.
func liveConfig(c *policy.Autopilot) autopilot.LiveConfig {
	return autopilot.LiveConfig{
		Detect: autopilot.DetectConfig{Floor: c.Floor, Multiple: c.Multiple},
		// 0% is asked for: a fingerprint may match no normal sample (the
		// pilot's zero is its default).
		Find:     autopilot.Config{Coverage: c.Coverage, BaselineMax: max(c.BaselineMax, math.SmallestNonzeroFloat64)},
		Learning: c.Learning, Expire: c.Expire, MaxRules: c.MaxRules,
		Shadow: c.Mode == policy.AutopilotShadow, Limit: c.Action == policy.AutopilotLimit,
	}
}

// restore loads the rules an earlier attach process left, before the
// first policy is compiled, so that they are in force from the start.
func (r *autopilotRunner) restore(c *policy.Autopilot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c == nil {
		removeAutopilotState(r.a.cfg.Interface)
		return
	}
	saved, err := readAutopilotState(r.a.cfg.Interface)
	if err != nil {
		if !errors.Is(err, errNoState) {
			r.log.Warn("autopilot: the rules of the previous attach process are lost", "err", err)
		}
		return
	}
	r.pilot = autopilot.NewPilot(liveConfig(c))
	r.pilot.Restore(saved)
	for _, g := range saved {
		r.log.Info("autopilot: rule restored", "rule", g.Name, "dest", g.Dest.String(), "age", time.Since(g.Created).Round(time.Second))
	}
}

// generated is what the policy's rules are preceded by: none while the
// autopilot is off.
func (r *autopilotRunner) generated(c *policy.Autopilot) []*autopilot.Generated {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c == nil || r.pilot == nil {
		return nil
	}
	return r.pilot.Rules()
}

// drop forgets generated rules that cannot be put in force.
func (r *autopilotRunner) drop(names []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pilot != nil {
		r.pilot.Drop(names...)
		r.saveLocked()
	}
}

// apply brings the autopilot in line with the policy in force.
func (r *autopilotRunner) apply(c *policy.Autopilot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c == nil {
		r.stopLocked()
		if r.pilot != nil {
			removeAutopilotState(r.a.cfg.Interface)
		}
		r.pilot, r.cfg = nil, nil
		r.m.Off()
		return
	}
	if r.pilot == nil {
		r.pilot = autopilot.NewPilot(liveConfig(c))
	} else {
		r.pilot.Configure(liveConfig(c))
	}
	r.cfg = c
	r.saveLocked()
	if r.cancel != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.runs.Add(1)
	go func() {
		defer r.runs.Done()
		r.run(ctx)
	}()
	r.log.Info("autopilot started", "interface", r.a.att.Interface, "mode", c.Mode.String(), "action", c.Action.String(),
		"sample", c.OneIn, "learning", c.Learning)
}

// stop ends the runner and waits for it. Not under the agent's mu: a
// tick in flight may be putting rules in force, which takes it.
func (r *autopilotRunner) stop() {
	r.mu.Lock()
	r.stopLocked()
	r.mu.Unlock()
	r.runs.Wait()
}

// stopLocked ends the runner without waiting: apply runs under the
// agent's mu, which a tick in flight may be waiting for. A tick that ends
// after it finds the pilot gone or changed, and its rules are judged anew.
func (r *autopilotRunner) stopLocked() {
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
}

// run reads the samples and ticks the pilot until ctx ends.
func (r *autopilotRunner) run(ctx context.Context) {
	l := r.a.att.Limiter
	_, _, cursor, err := l.TrafficRing(nil)
	if err != nil {
		r.log.Error("autopilot stopped: cannot read the samples", "err", err)
		return
	}
	read := time.NewTicker(pilotRead)
	defer read.Stop()
	wall := maps.MonotonicToWall()
	next := time.Now().Add(pilotTick)
	for {
		select {
		case <-ctx.Done():
			return
		case <-read.C:
		}
		samples, written, c, err := l.TrafficRing(cursor)
		if err != nil {
			r.log.Error("autopilot: cannot read the samples", "err", err)
			continue
		}
		cursor = c
		oneIn, err := l.TrafficSampling()
		if err != nil || oneIn == 0 {
			continue // a reload in between: the next read counts
		}
		batch := make([]autopilot.Sample, 0, len(samples))
		for _, s := range samples {
			if a, ok := autopilot.FromFrame(s.Frame, wall(s.At)); ok {
				batch = append(batch, a)
			}
		}
		// Samples the rings overwrote before this read stand for the
		// packets of those read.
		scale, lost := float64(oneIn), uint64(0)
		if len(samples) > 0 && written > uint64(len(samples)) {
			scale *= float64(written) / float64(len(samples))
			lost = written - uint64(len(samples))
		}
		r.m.Read(uint64(len(samples)), lost)
		r.mu.Lock()
		if r.pilot == nil {
			r.mu.Unlock()
			return
		}
		r.pilot.Add(batch, scale)
		r.mu.Unlock()
		if now := time.Now(); !now.Before(next) {
			next = now.Add(pilotTick)
			r.tick(now)
		}
	}
}

// tick closes an interval: the pilot's decisions logged and counted, and
// the rules put in force when they changed.
func (r *autopilotRunner) tick(now time.Time) {
	r.mu.Lock()
	if r.pilot == nil {
		r.mu.Unlock()
		return
	}
	events, changed := r.pilot.Tick(now)
	r.m.Observe(r.pilot, events)
	// Each second while rules are in force: their last attack moves on,
	// and a restarted process expires them from there.
	if changed || len(r.pilot.Rules()) > 0 {
		r.saveLocked()
	}
	r.mu.Unlock()
	for _, e := range events {
		r.logEvent(e)
	}
	if changed {
		if err := r.a.applyGenerated("autopilot"); err != nil {
			r.log.Error("autopilot: the rules could not be put in force; the policy's own rules enforce", "err", err)
		}
	}
}

// enforced stamps the rules just put in force with when they first were.
func (r *autopilotRunner) enforced(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pilot == nil {
		return
	}
	for _, g := range r.pilot.Rules() {
		if g.Enforced.IsZero() {
			g.Enforced = now
		}
	}
}

func (r *autopilotRunner) logEvent(e autopilot.Event) {
	args := []any{"interface", r.a.att.Interface, "dest", e.Dest.String()}
	switch e.Kind {
	case autopilot.EventAttack:
		r.log.Warn("autopilot: attack", append(args, "rate", int64(e.Rate), "baseline", int64(e.Baseline))...)
	case autopilot.EventRule:
		r.log.Warn("autopilot: rule", append(args, "rule", e.Rule.Name, "shadow", e.Rule.Shadow,
			"fingerprint", autopilot.Describe(e.Rule.Preds, true), "evidence", e.Rule.Evidence())...)
	case autopilot.EventNoRule:
		r.log.Warn("autopilot: no rule", append(args, "rate", int64(e.Rate), "why", e.Err.Error())...)
	case autopilot.EventEnded:
		r.log.Info("autopilot: attack ended", args...)
	case autopilot.EventRemoved:
		r.log.Info("autopilot: rule removed", append(args, "rule", e.Rule.Name,
			"age", e.Rule.LastAttack.Sub(e.Rule.Created).Round(time.Second))...)
	}
}

// keep and remove are the operator's: they change the pilot's rules and
// put the result in force.
func (r *autopilotRunner) keep(name string) (*autopilot.Generated, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pilot == nil {
		return nil, errAutopilotOff
	}
	g, err := r.pilot.Keep(name)
	if err == nil {
		r.saveLocked()
		r.log.Info("autopilot: rule kept by the operator", "rule", name)
	}
	return g, err
}

func (r *autopilotRunner) remove(name string) (*autopilot.Generated, error) {
	r.mu.Lock()
	if r.pilot == nil {
		r.mu.Unlock()
		return nil, errAutopilotOff
	}
	g, err := r.pilot.Remove(name)
	if err == nil {
		r.saveLocked()
		r.log.Info("autopilot: rule removed by the operator", "rule", name)
	}
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return g, r.a.applyGenerated("xdplimit autopilot remove")
}

var errAutopilotOff = errors.New("the policy in force has no autopilot: section")

// view is what `xdplimit autopilot list` shows.
func (r *autopilotRunner) view() AutopilotView {
	r.mu.Lock()
	defer r.mu.Unlock()
	v := AutopilotView{Interface: r.a.att.Interface}
	if r.cfg == nil || r.pilot == nil {
		return v
	}
	v.On, v.Mode, v.Action = true, r.cfg.Mode.String(), r.cfg.Action.String()
	now := time.Now()
	for _, g := range r.pilot.Rules() {
		v.Rules = append(v.Rules, ruleView(g, now))
	}
	for _, a := range r.pilot.Attacks() {
		v.Attacks = append(v.Attacks, AttackView{Dest: a.Dest.String(), Since: a.Since, PeakRate: a.Peak,
			BaselineRate: a.Baseline, NoRule: a.NoRule, Dismissed: a.Dismissed})
	}
	return v
}

func (r *autopilotRunner) saveLocked() {
	if r.pilot == nil {
		return
	}
	if err := writeAutopilotState(r.a.cfg.Interface, r.pilot.Rules()); err != nil {
		r.log.Warn("autopilot: cannot write its state file; a restart would lose its rules", "err", err)
	}
}
