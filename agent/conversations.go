// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xdplimit/xdplimit/conversation"
	"github.com/xdplimit/xdplimit/loader"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/policy"
)

// armEvery is how often the watches of under_attack checks are read: an
// attack is judged by the checks from at most this long after it starts.
const armEvery = time.Second

// convRunner keeps what the conversation checks need from the host while a
// conversations: section is in force: the local addresses (the checks
// judge only what is addressed to them), and for under_attack checks the
// arming, from their watches. A reload that changes the section restarts
// it; one that removes it stops it and disarms every check.
type convRunner struct {
	a       *loader.Attachment
	log     *slog.Logger
	inNetns func(func() error) error // runs fn in the interface's network namespace
	armed   *prometheus.GaugeVec

	mu     sync.Mutex
	conf   policy.Conversations
	cancel context.CancelFunc
	done   chan struct{}
}

func newConvRunner(a *loader.Attachment, log *slog.Logger, reg prometheus.Registerer, inNetns func(func() error) error) *convRunner {
	m := conversation.NewMetrics()
	r := &convRunner{a: a, log: log, inNetns: inNetns, armed: m.Armed}
	if err := reg.Register(m); err != nil {
		log.Warn("conversation metrics not registered", "err", err)
	}
	r.setGauges(policy.Conversations{}, nil)
	return r
}

// apply brings the runner in line with the section in force.
func (r *convRunner) apply(c policy.Conversations) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cancel != nil && c.Equal(r.conf) {
		return
	}
	r.stopLocked()
	r.conf = c
	if !c.Any() {
		if err := r.a.Limiter.SetConvArmed(); err != nil {
			r.log.Warn("conversations: disarming", "err", err)
		}
		r.setGauges(c, nil)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		err := r.inNetns(func() error {
			conversation.WatchLocal(ctx, r.a.Limiter.SetLocal, r.log)
			return nil
		})
		if err != nil {
			r.log.Error("conversations: local addresses not watched", "err", err)
		}
	}()
	go func() {
		defer wg.Done()
		r.arm(ctx, c)
	}()
	done := r.done
	go func() { wg.Wait(); close(done) }()
}

// arm reads the watches of the under_attack checks every armEvery and arms
// or disarms them, until ctx ends. A check armed when it starts (by the
// process before a restart) stays armed until its watch has been quiet for
// the hold.
func (r *convRunner) arm(ctx context.Context, c policy.Conversations) {
	l := r.a.Limiter
	guards := map[maps.Check]*conversation.Guard{}
	armedNow, err := l.ConvArmed()
	if err != nil {
		r.log.Warn("conversations: reading the armed checks", "err", err)
	}
	for _, ck := range maps.AllChecks {
		if convCheck(c, ck).When == policy.WhenUnderAttack {
			g := &conversation.Guard{Rate: float64(c.ArmRate), Hold: c.Hold}
			for _, a := range armedNow {
				if a == ck {
					g.Restore(true)
				}
			}
			guards[ck] = g
		}
	}
	r.write(c, guards)
	t := time.NewTicker(armEvery)
	defer t.Stop()
	for {
		changed := false
		for ck, g := range guards {
			w, err := l.ConvWatch(ck)
			if err != nil {
				r.log.Warn("conversations: reading the watch", "check", ck, "err", err)
				continue
			}
			ch := g.Observe(time.Now(), w)
			if ch == nil {
				continue
			}
			changed = true
			dst := netip.AddrPortFrom(ch.Destination, ch.Port).String()
			if ch.Armed {
				r.log.Warn("conversations: check armed: packets that belong to no conversation are dropped",
					"interface", r.a.Interface, "check", ck, "destination", dst, "protocol", ch.Protocol,
					"rate", int64(ch.Rate), "arm_rate", c.ArmRate)
			} else {
				r.log.Info("conversations: check disarmed: below half its arm rate for the hold",
					"interface", r.a.Interface, "check", ck, "hold", c.Hold, "rate", int64(ch.Rate))
			}
		}
		if changed {
			r.write(c, guards)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// write arms in the datapath the checks whose guard is armed.
func (r *convRunner) write(c policy.Conversations, guards map[maps.Check]*conversation.Guard) {
	var armed []maps.Check
	for ck, g := range guards {
		if g.Armed() {
			armed = append(armed, ck)
		}
	}
	if err := r.a.Limiter.SetConvArmed(armed...); err != nil {
		r.log.Error("conversations: arming", "err", err)
		return
	}
	r.setGauges(c, armed)
}

func (r *convRunner) setGauges(c policy.Conversations, armed []maps.Check) {
	for _, ck := range maps.AllChecks {
		v := 0.0
		if convCheck(c, ck).When == policy.WhenAlways {
			v = 1
		}
		for _, a := range armed {
			if a == ck {
				v = 1
			}
		}
		r.armed.WithLabelValues(r.a.Interface, ck.String()).Set(v)
	}
}

func convCheck(c policy.Conversations, ck maps.Check) policy.ConvCheck {
	switch ck {
	case maps.CheckUDP:
		return c.UDP
	case maps.CheckReflection:
		return c.Reflection
	}
	return c.TCP
}

func (r *convRunner) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopLocked()
}

func (r *convRunner) stopLocked() {
	if r.cancel == nil {
		return
	}
	r.cancel()
	<-r.done
	r.cancel, r.done = nil, nil
}
