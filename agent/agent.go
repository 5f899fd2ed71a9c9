// Package agent is the attach lifecycle of xdplimit, what `xdplimit attach`
// runs in the foreground: it listens for metrics scrapes, watches the policy
// file, compiles the policy and attaches the limiter (or adopts the pinned
// state an earlier agent left), runs the fleet sync and the drop log beside
// it, reloads the policy on request or when its files change, and at the end
// detaches, or with KeepOnExit leaves the limiter attached and pinned.
//
// cmd/xdplimit turns flags into a Config and process signals into calls;
// tests drive an Agent in-process the same way.
package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sync"

	"github.com/xdplimit/xdplimit/loader"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/metrics"
)

// dialFunc opens a network connection (net.Dialer's DialContext).
type dialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)

// Config is everything `xdplimit attach` decides from its flags. The flags
// are checked by the command; Start refuses only what it cannot run.
type Config struct {
	// Interface is attached to in the network namespace of the thread that
	// calls Start.
	Interface string
	// Policy is the policy file. It is read at Start and at every reload,
	// and watched, together with the list files it names.
	Policy string

	// Mode, Force, MaxSources, MaxOtherSources, MaxBans and Clock go to
	// loader.Attach (see loader.Config). A limiter adopted from pins keeps
	// its table sizes.
	Mode            loader.Mode
	Force           bool
	MaxSources      uint32
	MaxOtherSources uint32
	MaxBans         uint32
	Clock           maps.Clock

	// MetricsAddr is where /metrics and /healthz are served ("" for
	// nowhere). Port 0 picks a free port: see Agent.MetricsAddr.
	MetricsAddr string
	// LogDrops is --log-drops: "" leaves the drop log to the policy's log:
	// section; "-" turns it on, writing to the policy's file or stdout; a
	// path turns it on and wins over the policy's file.
	LogDrops string
	// KeepOnExit leaves the limiter attached and pinned when Run returns.
	KeepOnExit bool

	// Log receives what the agent does and what goes wrong beside the
	// datapath (nil: discarded).
	Log *slog.Logger
	// Warnings receives the policy's warnings, at Start and at every
	// reload, one "warning: " line each (nil: discarded).
	Warnings io.Writer
	// FleetDialer, when set, opens the fleet sync's connections to Redis
	// (tests dial from the namespace their Redis runs in).
	FleetDialer func(ctx context.Context, network, addr string) (net.Conn, error)
}

// ErrStopped is returned by Run and Reload once Run has stopped the agent.
var ErrStopped = errors.New("agent stopped")

// Agent is a limiter attached to an interface by this process, with what
// runs beside it.
type Agent struct {
	cfg      Config
	log      *slog.Logger
	warnings io.Writer
	path     string // the policy file, absolute

	att       *loader.Attachment
	exp       *metrics.Exporter
	fleet     *fleetRunner
	dropLog   *dropLogRunner
	changes   <-chan struct{} // the policy's files changed; nil when not watched
	stopWatch func()

	metricsAddr net.Addr
	stopServing context.CancelFunc
	served      chan error // the metrics server's result, once stopped

	// mu serialises reloads with each other and with the stop.
	mu      sync.Mutex
	stopped bool
}

// Start attaches the limiter with the policy and starts what runs beside
// it: the metrics server, the policy file's watcher, the fleet sync and the
// drop log. On error nothing is left behind: the interface is as it was and
// the metrics port is released. A fleet sync or drop log that cannot start
// is logged, and the limiter enforces without it, as after a reload.
//
// The caller must then call Run, which alone stops the agent.
func Start(cfg Config) (*Agent, error) {
	if cfg.Policy == "" {
		return nil, errors.New("no policy file")
	}
	path, err := filepath.Abs(cfg.Policy)
	if err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, log: cfg.Log, warnings: cfg.Warnings, path: path}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.warnings == nil {
		a.warnings = io.Discard
	}
	// Listen before attaching: a taken port fails before the interface is
	// touched. The error names the flag that sets the address.
	var ln net.Listener
	if cfg.MetricsAddr != "" {
		if ln, err = net.Listen("tcp", cfg.MetricsAddr); err != nil {
			return nil, fmt.Errorf("--metrics-addr: %w", err)
		}
	}
	// Watch before attach reads the policy: an edit made while attaching
	// is then not missed.
	a.changes, a.stopWatch = watchPolicy(path, a.log)
	pol, err := a.attach()
	if err != nil {
		a.stopWatch()
		if ln != nil {
			ln.Close()
		}
		return nil, err
	}
	a.exp = metrics.New(a.log)
	a.fleet = newFleetRunner(a.att, a.log, a.exp.Registry(), cfg.FleetDialer)
	if err := a.fleet.apply(pol.Fleet); err != nil {
		// Only a password file that vanished since the policy was read
		// gets here: the limiter enforces locally.
		a.log.Error("fleet sync not started; fleet levels enforce locally", "err", err)
	}
	a.dropLog = newDropLogRunner(a.att, cfg.LogDrops, a.log, a.exp.Registry())
	if err := a.dropLog.apply(pol.Log); err != nil {
		// A file that cannot be opened: enforcement goes on.
		a.log.Error("drop log not started", "err", err)
	}
	a.served = make(chan error, 1)
	srvCtx, stopServing := context.WithCancel(context.Background())
	a.stopServing = stopServing
	if ln != nil {
		if err := a.exp.Add(a.att.Interface, a.att.Limiter, 0); err != nil {
			a.log.Warn("metrics unavailable", "err", err)
		}
		a.metricsAddr = ln.Addr()
		go func() { a.served <- a.exp.ServeListener(srvCtx, ln) }()
		a.log.Info("serving metrics", "addr", "http://"+ln.Addr().String()+"/metrics")
	} else {
		a.served <- nil
	}
	return a, nil
}

// attach compiles the policy (its warnings go to the agent's warnings) and
// attaches with it.
func (a *Agent) attach() (loader.Policy, error) {
	p, _, err := CompilePolicy(a.path, a.warnings)
	if err != nil {
		return loader.Policy{}, err
	}
	c := a.cfg
	att, err := loader.Attach(loader.Config{Interface: c.Interface, Mode: c.Mode, Force: c.Force,
		MaxSources: c.MaxSources, MaxOtherSources: c.MaxOtherSources, MaxBans: c.MaxBans, Clock: c.Clock,
		Policy: p, Warn: func(s string) { a.log.Warn(s) }})
	if err != nil {
		return loader.Policy{}, err
	}
	a.att = att
	l := att.Limiter
	// adopted=true: took over the pinned limiter of an earlier attach,
	// its counters and buckets, without an enforcement gap.
	a.log.Info("attached", "interface", c.Interface, "mode", att.Mode, "adopted", att.Adopted, "policy", a.path,
		"rules", len(p.Image.Rules), "clock", l.Clock(), "max_sources", l.SourcesCapacity(),
		"max_bans", l.BansCapacity(), "ban_table_bytes", uint64(l.BansCapacity())*maps.BanBytes())
	return p, nil
}

// Interface is the interface the agent attached to.
func (a *Agent) Interface() string { return a.att.Interface }

// Mode is the XDP mode in effect: native or generic.
func (a *Agent) Mode() loader.Mode { return a.att.Mode }

// Adopted reports whether Start took over the pinned limiter of an earlier
// agent (its counters and every source's state) rather than loading anew.
func (a *Agent) Adopted() bool { return a.att.Adopted }

// MetricsAddr is the address the metrics are served on, the port chosen
// when Config.MetricsAddr asked for port 0; nil when not served.
func (a *Agent) MetricsAddr() net.Addr { return a.metricsAddr }

// Run serves until ctx ends, reloading when the watcher reports changed
// contents of the policy's files, then stops the agent: the watcher, the
// drop log (after its last lines), the metrics server (after the scrapes in
// flight) and the fleet sync stop while the maps are open, then the limiter
// is detached and its pins removed or, with KeepOnExit, left attached and
// pinned. It returns the error of that last step.
func (a *Agent) Run(ctx context.Context) error {
	a.mu.Lock()
	stopped := a.stopped
	a.mu.Unlock()
	if stopped {
		return ErrStopped
	}
	for {
		select {
		case <-a.changes:
			a.Reload("file change")
		case <-ctx.Done():
			return a.stop()
		}
	}
}

// Reload reads and compiles the policy file again and applies it as one
// atomic switch, then brings the fleet sync and the drop log in line with
// it. It returns why it failed, and then the previous policy stays in
// force; the result is also logged, with trigger as its cause, and counted
// in xdplimit_policy_reloads_total. Reloads are serialised; after Run has
// stopped the agent, Reload returns ErrStopped.
func (a *Agent) Reload(trigger string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopped {
		return ErrStopped
	}
	p, _, err := CompilePolicy(a.path, a.warnings)
	if err == nil {
		err = a.att.Reload(p)
	}
	if err == nil {
		err = a.fleet.apply(p.Fleet)
	}
	if err == nil {
		err = a.dropLog.apply(p.Log)
	}
	a.exp.ReloadResult(a.att.Interface, err)
	if err != nil {
		a.log.Error("reload failed; the previous policy stays in force", "policy", a.path, "trigger", trigger, "err", err)
	} else {
		a.log.Info("reloaded", "policy", a.path, "trigger", trigger)
	}
	return err
}

// stop ends the agent (see Run).
func (a *Agent) stop() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopped {
		return ErrStopped
	}
	a.stopped = true
	a.stopWatch()
	// Everything that reads or writes the maps stops before they close:
	// the drop log writes its last lines, scrapes in flight finish, and
	// the fleet sync releases the reserves of its fixed windows
	// (fleet.Engine.Close), which nothing would release once this process
	// has left the limiter behind.
	a.dropLog.stop()
	a.stopServing()
	if err := <-a.served; err != nil {
		a.log.Warn("metrics server", "err", err)
	}
	a.fleet.stop()
	if a.cfg.KeepOnExit {
		a.log.Info("exiting; the limiter stays attached (--keep-on-exit)", "interface", a.att.Interface)
		return a.att.Close()
	}
	a.log.Info("detaching", "interface", a.att.Interface)
	return a.att.Detach()
}

// Detach removes the limiter of iface that no agent holds any more: one
// left by an agent that exited with KeepOnExit or was killed. A killed
// agent whose fleet sync ran also left its status file, removed with it.
func Detach(iface string) error {
	if err := loader.Detach(iface); err != nil {
		return err
	}
	removeFleetStatus(iface)
	return nil
}
