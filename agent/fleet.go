// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xdplimit/xdplimit/fleet"
	"github.com/xdplimit/xdplimit/loader"
	"github.com/xdplimit/xdplimit/policy"
)

// fleetRunner runs the fleet sync of an attach beside the datapath. A
// reload that keeps the fleet: section keeps the engine (the levels in force
// are re-read); one that changes it restarts the engine; one that drops it
// stops the engine. No change here touches the datapath's state: reloads
// keep every level's state as before.
type fleetRunner struct {
	a    *loader.Attachment
	log  *slog.Logger
	reg  prometheus.Registerer
	dial dialFunc // nil: the default dialer

	mu     sync.Mutex
	conf   *policy.Fleet
	e      *fleet.Engine
	cancel context.CancelFunc
	done   chan struct{}
}

func newFleetRunner(a *loader.Attachment, log *slog.Logger, reg prometheus.Registerer, dial dialFunc) *fleetRunner {
	return &fleetRunner{a: a, log: log, reg: reg, dial: dial}
}

// apply brings the runner in line with the fleet: section in force.
func (r *fleetRunner) apply(f *policy.Fleet) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f != nil && r.e != nil && reflect.DeepEqual(f, r.conf) {
		return r.e.Reload()
	}
	r.stopLocked()
	if f == nil {
		return nil
	}
	pw, err := fleet.Password(f)
	if err != nil {
		return err
	}
	iface := r.a.Interface
	e, err := fleet.New(fleet.Options{Fleet: f, Password: pw, Interface: iface, Dialer: r.dial,
		Logf: func(format string, args ...any) { r.log.Warn(fmt.Sprintf(format, args...), "interface", iface) },
	}, r.a.Limiter)
	if err != nil {
		return err
	}
	if r.reg != nil {
		if err := r.reg.Register(e.Metrics()); err != nil {
			r.log.Warn("fleet metrics unavailable", "err", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.conf, r.e, r.cancel, r.done = f, e, cancel, make(chan struct{})
	// done closes once both the sync and the status writer have returned:
	// stopLocked then closes the engine, and no sync in flight can set a
	// reserve again after the close released them, nor touch maps that
	// close next.
	go func(done chan struct{}) {
		defer close(done)
		synced := make(chan struct{})
		go func() {
			defer close(synced)
			e.Run(ctx)
		}()
		writeFleetStatus(ctx, iface, e, r.log)
		<-synced
	}(r.done)
	r.log.Info("fleet sync started", "interface", iface, "redis", f.Redis, "namespace", f.Namespace,
		"sync", f.Sync, "fallback", f.Fallback)
	return nil
}

func (r *fleetRunner) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopLocked()
}

func (r *fleetRunner) stopLocked() {
	if r.e == nil {
		return
	}
	r.cancel()
	<-r.done
	if r.reg != nil {
		r.reg.Unregister(r.e.Metrics())
	}
	r.e.Close()
	removeFleetStatus(r.a.Interface)
	r.e, r.conf = nil, nil
}
