// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"io"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xdplimit/xdplimit/compiler"
	"github.com/xdplimit/xdplimit/droplog"
	"github.com/xdplimit/xdplimit/loader"
	"github.com/xdplimit/xdplimit/policy"
)

// dropLogRunner runs the drop log beside an attachment: on with
// --log-drops or a log: section, following the policy across reloads.
type dropLogRunner struct {
	a    *loader.Attachment
	flag string // --log-drops: "" off unless the policy has log:, "-" stdout, else a file
	log  *slog.Logger
	reg  prometheus.Registerer

	mu     sync.Mutex
	l      *droplog.Logger
	m      *droplog.Metrics
	path   string // the output in use
	cancel context.CancelFunc
	done   chan struct{}
	// applied: the policy at attach was applied. Only a logger started
	// then reads the rings from the limiter's attach; one a reload
	// turns on starts from that moment.
	applied bool
}

func newDropLogRunner(a *loader.Attachment, flag string, log *slog.Logger, reg prometheus.Registerer) *dropLogRunner {
	return &dropLogRunner{a: a, flag: flag, log: log, reg: reg}
}

// output is where lines go: a path given to --log-drops, else the
// policy's file, else stdout.
func (r *dropLogRunner) output(p policy.Log) string {
	if r.flag != "" && r.flag != "-" {
		return r.flag
	}
	if p.File != "" {
		return p.File
	}
	return "-"
}

// apply brings the drop log in line with the policy in force.
func (r *dropLogRunner) apply(p policy.Log) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	first := !r.applied
	r.applied = true
	if r.flag == "" && !p.Set {
		r.stopLocked()
		return nil
	}
	_, keep := compiler.SampleOneIn(p)
	s := droplog.Settings{Keep: keep, MaxPerSecond: p.RateCap()}
	path := r.output(p)
	if r.l != nil {
		r.l.Configure(s)
		if path == r.path {
			return nil
		}
		out, closer, err := droplog.Open(path)
		if err != nil {
			return err
		}
		r.path = path
		return r.l.SetOutput(out, closer)
	}
	out, closer, err := droplog.Open(path)
	if err != nil {
		return err
	}
	if r.m == nil {
		r.m = droplog.NewMetrics(r.a.Interface)
		if r.reg != nil {
			if err := r.reg.Register(r.m); err != nil {
				r.log.Warn("drop log metrics unavailable", "err", err)
			}
		}
	}
	l, err := droplog.New(r.a.Interface, r.a.Limiter, s, out, closer, r.m, nil, nil)
	if err != nil {
		closeQuietly(closer)
		return err
	}
	if first && !r.a.Adopted {
		l.FromStart()
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.l, r.path, r.cancel, r.done = l, path, cancel, make(chan struct{})
	go func(done chan struct{}) {
		defer close(done)
		if err := l.Run(ctx, droplog.PollInterval); err != nil {
			r.log.Error("drop log stopped", "err", err)
		}
	}(r.done)
	r.log.Info("drop log started", "interface", r.a.Interface, "output", path, "sample", p.SampleOneIn(),
		"max_per_second", p.RateCap())
	return nil
}

func (r *dropLogRunner) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopLocked()
}

func (r *dropLogRunner) stopLocked() {
	if r.l == nil {
		return
	}
	r.cancel()
	<-r.done
	if err := r.l.Close(); err != nil {
		r.log.Warn("drop log output", "err", err)
	}
	r.l, r.path = nil, ""
}

func closeQuietly(c io.Closer) {
	if c != nil {
		c.Close()
	}
}
