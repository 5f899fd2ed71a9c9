// SPDX-License-Identifier: Apache-2.0

// Package agent is the attach lifecycle of xdplimit, what `xdplimit attach`
// runs in the foreground: it takes the interface's lock and serves its
// control socket, claims the metrics address (or finds the attach process
// that serves it for every interface), compiles the policy, waits for the
// interface if it is missing, attaches the limiter (or adopts the pinned
// state an earlier agent left, migrating it from another map layout), runs
// the fleet sync, the drop log and the CrowdSec bouncer beside it, reloads
// the policy on request
// (or, with Watch, when its files change and have settled), and at the end
// leaves the limiter attached and pinned, or with DetachOnExit detaches it.
//
// cmd/xdplimit turns flags into a Config and process signals into calls;
// tests drive an Agent in-process the same way.
package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"time"

	"github.com/xdplimit/xdplimit/internal/netns"
	"github.com/xdplimit/xdplimit/loader"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/metrics"
	"github.com/xdplimit/xdplimit/policy"
)

// dialFunc opens a network connection (net.Dialer's DialContext).
type dialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)

// WaitForever is Config.WaitForInterface for no time limit.
const WaitForever time.Duration = -1

// Config is everything `xdplimit attach` decides from its flags. The flags
// are checked by the command; Start refuses only what it cannot run.
type Config struct {
	// Interface is attached to in the network namespace of the thread that
	// calls Start.
	Interface string
	// Policy is the policy file, read at Start and at every reload.
	Policy string
	// Watch reloads the policy when it, or a list file it names, changes
	// and has then stayed the same for a settle interval.
	Watch bool

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
	// nowhere) for this interface and for every other agent of the same
	// network namespace configured with the same address: whichever holds
	// it serves them all. Port 0 picks a free port: see Agent.MetricsAddr.
	MetricsAddr string
	// LogDrops is --log-drops: "" leaves the drop log to the policy's log:
	// section; "-" turns it on, writing to the policy's file or stdout; a
	// path turns it on and wins over the policy's file.
	LogDrops string
	// WaitForInterface is how long Start waits for a missing interface to
	// appear: 0 fails at once, WaitForever waits until its context ends.
	WaitForInterface time.Duration
	// DetachOnExit detaches the limiter and removes its pins when Run
	// returns. Without it the limiter stays attached and pinned, enforcing
	// the last policy, until `xdplimit detach` or the next agent.
	DetachOnExit bool

	// Log receives what the agent does and what goes wrong beside the
	// datapath (nil: discarded).
	Log *slog.Logger
	// Warnings receives the policy's warnings, at Start and at every
	// reload, one "warning: " line each (nil: discarded).
	Warnings io.Writer
	// FleetDialer, when set, opens the fleet sync's connections to Redis
	// (tests dial from the namespace their Redis runs in).
	FleetDialer func(ctx context.Context, network, addr string) (net.Conn, error)
	// CrowdSecDialer, when set, opens the CrowdSec bouncer's connections
	// to the Local API (tests dial from the namespace their LAPI runs in).
	CrowdSecDialer func(ctx context.Context, network, addr string) (net.Conn, error)
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
	ns       *netns.Netns
	nsIno    uint64

	lock      *loader.Lock // until att holds it
	att       *loader.Attachment
	exp       *metrics.Exporter
	fleet     *fleetRunner
	dropLog   *dropLogRunner
	crowdsec  *crowdsecRunner
	conv      *convRunner
	autopilot *autopilotRunner
	// parsed is the policy in force, as parsed: the autopilot's rules are
	// put in force with it (applyGenerated).
	parsed    *policy.Policy
	changes   <-chan struct{} // the policy's files changed; nil when not watched
	stopWatch func()

	ctl     *controlServer
	metrics *metricsServer // nil without a metrics address

	// mu serialises reloads with each other, with the end of Start and
	// with the stop.
	mu       sync.Mutex
	attached bool
	stopped  bool
}

// Start takes the interface's lock, serves the control socket, claims the
// metrics address, compiles the policy, waits for the interface as
// Config.WaitForInterface says (until ctx ends), and attaches the limiter
// with the policy; then it starts what runs beside it: the policy's
// watcher, the fleet sync, the drop log and the CrowdSec bouncer. On error
// nothing is left behind: the interface is as it was, the socket and the
// metrics port are released. A fleet sync, drop log or bouncer that cannot
// start is logged, and the limiter enforces without it, as after a reload.
//
// The caller must then call Run, which alone stops the agent.
func Start(ctx context.Context, cfg Config) (_ *Agent, err error) {
	if cfg.Policy == "" {
		return nil, errors.New("no policy file")
	}
	path, err := filepath.Abs(cfg.Policy)
	if err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, log: cfg.Log, warnings: cfg.Warnings, path: path, stopWatch: func() {}}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.warnings == nil {
		a.warnings = io.Discard
	}
	if a.lock, err = loader.LockInterface(cfg.Interface); err != nil {
		return nil, err
	}
	// The network namespace of the calling thread: the metrics address is
	// bound there, also when a later goroutine takes it over.
	if a.ns, err = netns.Open("/proc/thread-self/ns/net"); err != nil {
		a.lock.Unlock()
		return nil, err
	}
	a.nsIno, _ = loader.NetnsInode()
	defer func() {
		if err != nil {
			a.release()
		}
	}()
	a.exp = metrics.New(a.log)
	a.exp.SetPending(cfg.Interface, "not attached yet")
	a.exp.SetPeers(a.peers)
	if a.ctl, err = a.serveControl(); err != nil {
		return nil, err
	}
	// The metrics address before the interface: an address in use by
	// another program fails before anything is touched.
	if cfg.MetricsAddr != "" {
		if a.metrics, err = a.claimMetrics(); err != nil {
			return nil, err
		}
	}
	// Watch before the policy is read: an edit made while attaching is
	// then not missed.
	if cfg.Watch {
		a.changes, a.stopWatch = watchPolicy(path, a.log)
	}
	p, err := loadPolicy(path, a.warnings)
	if err != nil {
		return nil, err
	}
	// The rules an earlier attach process generated are in force from
	// the first moment, as the rest of its policy is.
	a.autopilot = newAutopilotRunner(a, a.exp.Registry())
	a.autopilot.restore(p.Autopilot)
	pol, err := a.compileMerged(p)
	if err != nil {
		return nil, err
	}
	a.parsed = p
	if err := waitForInterface(ctx, cfg.Interface, cfg.WaitForInterface, a.log, a.exp); err != nil {
		return nil, err
	}
	if err := a.attach(pol); err != nil {
		return nil, err
	}
	a.startBeside(pol)
	a.mu.Lock()
	a.attached = true
	a.mu.Unlock()
	return a, nil
}

// startBeside starts what runs beside the limiter: the fleet sync, the drop
// log and the CrowdSec bouncer, and the limiter's metrics. One that cannot
// start is logged, and the limiter enforces without it.
func (a *Agent) startBeside(pol loader.Policy) {
	a.fleet = newFleetRunner(a.att, a.log, a.exp.Registry(), a.cfg.FleetDialer)
	if err := a.fleet.apply(pol.Fleet); err != nil {
		// Only a password file that vanished since the policy was read
		// gets here: the limiter enforces locally.
		a.log.Error("fleet sync not started; fleet levels enforce locally", "err", err)
	}
	a.dropLog = newDropLogRunner(a.att, a.cfg.LogDrops, a.log, a.exp.Registry())
	if err := a.dropLog.apply(pol.Log); err != nil {
		// A file that cannot be opened: enforcement goes on.
		a.log.Error("drop log not started", "err", err)
	}
	a.crowdsec = newCrowdSecRunner(a.att, a.log, a.exp.Registry(), a.cfg.CrowdSecDialer)
	if err := a.crowdsec.apply(pol.CrowdSec); err != nil {
		// Only a key file that changed since the policy was read.
		a.log.Error("crowdsec bouncer not started", "err", err)
	}
	a.conv = newConvRunner(a.att, a.log, a.exp.Registry(), a.inNetns)
	a.conv.apply(pol.Conversations)
	a.autopilot.apply(pol.Autopilot)
	if err := a.exp.Add(a.att.Interface, a.att.Limiter, 0); err != nil {
		a.log.Warn("metrics unavailable", "err", err)
	}
}

// release undoes what Start did before it failed.
func (a *Agent) release() {
	a.stopWatch()
	if a.metrics != nil {
		a.metrics.stop()
	}
	if a.ctl != nil {
		a.ctl.stop()
	}
	a.ns.Close()
	a.lock.Unlock()
}

// attach attaches with the compiled policy and logs how.
func (a *Agent) attach(p loader.Policy) error {
	c := a.cfg
	att, err := loader.Attach(loader.Config{Interface: c.Interface, Mode: c.Mode, Force: c.Force,
		MaxSources: c.MaxSources, MaxOtherSources: c.MaxOtherSources, MaxBans: c.MaxBans, Clock: c.Clock,
		Policy: p, Lock: a.lock, Warn: func(s string) { a.log.Warn(s) }})
	if err != nil {
		return err
	}
	a.att = att
	if att.NativeErr != nil {
		a.log.Warn("native XDP failed; running in generic mode, where every packet, dropped or not, is judged after "+
			"the kernel allocated its socket buffer: several times the per-packet cost of native mode, so a flood "+
			"costs much more CPU (use a driver with native XDP, or --mode native to refuse this fallback)",
			"interface", c.Interface, "native_err", att.NativeErr)
	}
	if m := att.Migrated; m != nil {
		a.log.Warn("replaced a limiter of another map layout without a gap: its bans carried over, the policy's "+
			"lists and rules written anew; every source's state (buckets, windows) and the counters start afresh",
			"interface", c.Interface, "from_layout", m.From, "to_layout", maps.LayoutVersion, "bans", m.Bans)
	}
	l := att.Limiter
	// adopted=true: took over the pinned limiter of an earlier attach,
	// without an enforcement gap.
	a.log.Info("attached", "interface", c.Interface, "mode", att.Mode, "adopted", att.Adopted, "policy", a.path,
		"rules", len(p.Image.Rules), "clock", l.Clock(), "max_sources", l.SourcesCapacity(),
		"max_bans", l.BansCapacity(), "ban_table_bytes", uint64(l.BansCapacity())*maps.BanBytes())
	return nil
}

// Interface is the interface the agent attached to.
func (a *Agent) Interface() string { return a.att.Interface }

// Mode is the XDP mode in effect: native or generic.
func (a *Agent) Mode() loader.Mode { return a.att.Mode }

// Adopted reports whether Start took over the pinned limiter of an earlier
// agent rather than loading anew.
func (a *Agent) Adopted() bool { return a.att.Adopted }

// MetricsAddr is the address the metrics are served on by this process,
// the port chosen when Config.MetricsAddr asked for port 0; nil while
// another process holds the address, or without one.
func (a *Agent) MetricsAddr() net.Addr {
	if a.metrics == nil {
		return nil
	}
	return a.metrics.addr()
}

// Run serves until ctx ends, reloading when the watcher reports changed
// contents of the policy's files, then stops the agent: the watcher, the
// drop log (after its last lines), the metrics server and the control
// socket (after the requests in flight), the fleet sync and the CrowdSec
// bouncer stop while the maps are open; then the limiter is left attached
// and pinned or, with DetachOnExit, detached and its pins removed. It
// returns the error of that last step.
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
			_ = a.Reload("file change")
		case <-ctx.Done():
			return a.stop()
		}
	}
}

// stop ends the agent (see Run).
func (a *Agent) stop() error {
	// Once stopped is set, reloads refuse; one in flight has finished, as
	// it held mu. Requests to the control socket (which take mu briefly)
	// are then answered while it shuts down.
	a.mu.Lock()
	if a.stopped {
		a.mu.Unlock()
		return ErrStopped
	}
	a.stopped = true
	a.mu.Unlock()
	a.stopWatch()
	// Everything that reads or writes the maps stops before they close:
	// the drop log writes its last lines, scrapes in flight finish, and
	// the fleet sync releases the reserves of its fixed windows
	// (fleet.Engine.Close), which nothing would release once this process
	// has left the limiter behind. The control socket goes while the lock
	// is held: the next agent's is not removed by mistake.
	a.dropLog.stop()
	if a.metrics != nil {
		a.metrics.stop()
	}
	a.ctl.stop()
	a.fleet.stop()
	a.crowdsec.stop()
	a.conv.stop()
	a.autopilot.stop()
	defer a.ns.Close()
	if a.cfg.DetachOnExit {
		a.log.Info("detaching (--detach-on-exit)", "interface", a.att.Interface)
		removeAutopilotState(a.att.Interface)
		// In the interface's namespace: the egress filter is found by
		// the interface's index there.
		return a.inNetns(a.att.Detach)
	}
	a.log.Info("exiting; the limiter stays attached and enforcing the last policy; `xdplimit detach "+
		a.att.Interface+"` removes it", "interface", a.att.Interface)
	return a.att.Close()
}

// Detach removes the limiter of iface that no agent holds any more: one
// left by an agent that exited or was killed. A killed agent whose fleet
// sync ran also left its status file, removed with it.
func Detach(iface string) error {
	if err := loader.Detach(iface); err != nil {
		return err
	}
	removeFleetStatus(iface)
	removeAutopilotState(iface)
	return nil
}
