// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/xdplimit/xdplimit/loader"
	"github.com/xdplimit/xdplimit/metrics"
)

// One metrics address serves every interface. Each agent is configured
// with an address (127.0.0.1:9740 by default); the first to bind it serves
// /metrics and /healthz for itself and for every other agent of its network
// namespace configured with the same address, whose series it gathers
// through their control sockets at each scrape. An agent that finds the
// address held by another agent does not fail: it tries to bind it every
// second, so that when the holder stops another takes over. An address held
// by anything else is an error at start.

// retakeEvery is how often an agent whose address another agent holds
// tries to bind it.
const retakeEvery = time.Second

// holderWait bounds how long an agent that finds its metrics address in use
// looks for the agent holding it: agents bind the address as they start,
// before they attach, so one starting beside this one may not answer yet.
const holderWait = 3 * time.Second

// metricsServer is an agent's part in serving the metrics address.
type metricsServer struct {
	a       *Agent
	cancel  context.CancelFunc
	done    chan struct{}
	holding atomic.Bool

	mu    sync.Mutex
	bound net.Addr
}

// claimMetrics binds the metrics address and serves it, or, when another
// agent holds it, tries to take it over every retakeEvery.
func (a *Agent) claimMetrics() (*metricsServer, error) {
	ln, err := a.listenMetrics()
	if err != nil {
		if !errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("--metrics-addr: %w", err)
		}
		holder, ok := a.findHolder(holderWait)
		if !ok {
			return nil, fmt.Errorf("--metrics-addr: %w, and no xdplimit attach process serves it", err)
		}
		a.log.Info("metrics served by the attach process holding the address", "addr", a.cfg.MetricsAddr,
			"pid", holder.Pid, "its_interface", holder.Interface)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &metricsServer{a: a, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		m.run(ctx, ln)
	}()
	return m, nil
}

// listenMetrics binds the metrics address in the agent's namespace, from
// whichever goroutine asks.
func (a *Agent) listenMetrics() (ln net.Listener, err error) {
	err = a.inNetns(func() error {
		ln, err = net.Listen("tcp", a.cfg.MetricsAddr)
		return err
	})
	return ln, err
}

// inNetns runs fn in the agent's network namespace. A thread already there
// runs it directly: the systemd unit forbids setns (RestrictNamespaces=),
// and an attach process has one namespace; only an agent started in
// another namespace than its process's (tests) enters it.
func (a *Agent) inNetns(fn func() error) error {
	if ino, _ := loader.NetnsInode(); ino == a.nsIno {
		return fn()
	}
	return a.ns.Do(fn)
}

// run serves ln, or first waits to bind the address when ln is nil.
func (m *metricsServer) run(ctx context.Context, ln net.Listener) {
	a := m.a
	t := time.NewTicker(retakeEvery)
	defer t.Stop()
	logged := ""
	for ln == nil {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var err error
		if ln, err = a.listenMetrics(); err != nil && !errors.Is(err, syscall.EADDRINUSE) && err.Error() != logged {
			a.log.Warn("cannot bind the metrics address; retrying", "addr", a.cfg.MetricsAddr, "err", err)
			logged = err.Error()
		}
		if ln != nil {
			a.log.Info("took over the metrics address", "addr", a.cfg.MetricsAddr)
		}
	}
	m.mu.Lock()
	m.bound = ln.Addr()
	m.mu.Unlock()
	m.holding.Store(true)
	a.log.Info("serving metrics for every attach process on this address", "addr", "http://"+ln.Addr().String()+"/metrics")
	if err := a.exp.ServeListener(ctx, ln); err != nil {
		a.log.Warn("metrics server", "err", err)
	}
	m.holding.Store(false)
}

// held reports whether this agent serves the address now.
func (m *metricsServer) held() bool { return m.holding.Load() }

// addr is the bound address, nil while another agent holds it.
func (m *metricsServer) addr() net.Addr {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.holding.Load() {
		return nil
	}
	return m.bound
}

// stop closes the server after the scrapes in flight, or stops waiting.
func (m *metricsServer) stop() {
	m.cancel()
	<-m.done
}

// findHolder looks, for up to wait, for the agent that holds this agent's
// metrics address in its network namespace.
func (a *Agent) findHolder(wait time.Duration) (Info, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for {
		for _, i := range a.sameAddress(ctx) {
			if i.MetricsHeld {
				return i, true
			}
		}
		select {
		case <-ctx.Done():
			return Info{}, false
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// sameAddress asks every other agent's control socket who it is, and
// returns those configured with this agent's metrics address in its
// network namespace. Sockets nobody answers on are a killed agent's.
func (a *Agent) sameAddress(ctx context.Context) []Info {
	paths, _ := filepath.Glob(filepath.Join(loader.RunDir(), "*.ctl"))
	own := ControlSocket(a.cfg.Interface)
	var out []Info
	for _, p := range paths {
		if p == own {
			continue
		}
		var i Info
		if err := askJSON(ctx, p, http.MethodGet, "/info", &i); err != nil {
			continue
		}
		if i.MetricsAddr == a.cfg.MetricsAddr && i.Netns == a.nsIno && i.Interface != a.cfg.Interface {
			out = append(out, i)
		}
	}
	return out
}

// peers are the other agents whose series this one serves while it holds
// the address.
func (a *Agent) peers(ctx context.Context) []metrics.Peer {
	if a.metrics == nil || !a.metrics.held() {
		return nil
	}
	var out []metrics.Peer
	for _, i := range a.sameAddress(ctx) {
		out = append(out, metrics.HTTPPeer{Name: i.Interface, Client: controlClient(ControlSocket(i.Interface)),
			URL: controlURL})
	}
	return out
}
