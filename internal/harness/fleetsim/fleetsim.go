// SPDX-License-Identifier: Apache-2.0

// Package fleetsim simulates a fleet of xdplimit hosts on one machine: each
// host is the real XDP program, loaded with an injected clock
// (maps.ClockMap) and run with BPF_PROG_TEST_RUN, beside its real sync
// engine talking to a real Redis. One clock drives them all, so a simulated
// 10 s flood is deterministic and takes far less than 10 s, whatever else
// the machine runs. The fleet package's tests and the benchmark program use
// it; it does not import package testing (every failure is an error), so the
// benchmark program links no test code through it. Its live counterpart, a
// fleet of real attach processes in namespaces, is the test kit
// internal/testkit/fleetlab.
package fleetsim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/compiler"
	"github.com/xdplimit/xdplimit/fleet"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/policy"
)

// Config describes a simulated fleet.
type Config struct {
	// Hosts is the number of hosts.
	Hosts int
	// Policy is the YAML every host runs; it needs a fleet: section.
	Policy string
	// Dial opens the engines' connections to Redis (fleet.Options.Dialer).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Logf receives the engines' changes of state.
	Logf func(format string, args ...any)
	// MaxSources sizes each host's source table (default 4096).
	MaxSources uint32
	// BenchRotate, BenchBase and TrackAfter are passed to each host's
	// program (maps.Options): a benchmark walks many sources with one
	// buffer.
	BenchRotate uint32
	BenchBase   netip.Addr
	TrackAfter  uint32
}

// WallBase is the injected wall clock (and Redis clock) at simulated time
// zero, in ns since 1970.
const WallBase = int64(1_800_000_000) * 1e9

// Fleet is a simulated fleet: its hosts and their shared clock.
type Fleet struct {
	Hosts  []*Host
	Policy *policy.Policy
	now    uint64 // the datapath clock of every host, ns
}

// Host is one simulated member: its program and maps, and its engine.
type Host struct {
	L     *maps.Limiter
	E     *fleet.Engine
	f     *Fleet
	clock uint64 // the clock last written into this host's clock map
}

// New loads cfg.Hosts limiters with the policy and an engine for each.
// The engines connect to Redis at their first sync.
func New(cfg Config) (*Fleet, error) {
	img, p, err := compiler.CompileYAML("fleet.yaml", []byte(cfg.Policy))
	if err != nil {
		return nil, err
	}
	if p.Fleet == nil {
		return nil, errors.New("fleetsim: the policy has no fleet: section")
	}
	if cfg.MaxSources == 0 {
		cfg.MaxSources = 1 << 12
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	f := &Fleet{Policy: p, now: 1e9}
	for i := range cfg.Hosts {
		h, err := f.newHost(cfg, img, i)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("host %d: %w", i, err)
		}
		f.Hosts = append(f.Hosts, h)
	}
	return f, nil
}

func (f *Fleet) newHost(cfg Config, img *maps.Image, i int) (*Host, error) {
	l, err := maps.Load(maps.Options{Clock: maps.ClockMap, MaxSources: cfg.MaxSources,
		BenchRotate: cfg.BenchRotate, BenchBase: cfg.BenchBase, TrackAfter: cfg.TrackAfter})
	if err != nil {
		return nil, err
	}
	if err := l.Apply(img); err != nil {
		l.Close()
		return nil, err
	}
	e, err := fleet.New(fleet.Options{
		Fleet: f.Policy.Fleet, Interface: fmt.Sprintf("h%d", i), Logf: cfg.Logf,
		Now:     f.Now,
		Wall:    func() int64 { return WallBase + int64(f.now) },
		RedisUs: func() float64 { return float64(WallBase+int64(f.now)) / 1e3 },
		Dialer:  cfg.Dial,
	}, l)
	if err != nil {
		l.Close()
		return nil, err
	}
	return &Host{L: l, E: e, f: f}, nil
}

// Close closes every engine and limiter.
func (f *Fleet) Close() error {
	var errs []error
	for _, h := range f.Hosts {
		errs = append(errs, h.E.Close(), h.L.Close())
	}
	f.Hosts = nil
	return errors.Join(errs...)
}

// Now is the simulated datapath clock, ns.
func (f *Fleet) Now() uint64 { return f.now }

// Advance moves the shared clock forward by d.
func (f *Fleet) Advance(d time.Duration) { f.now += uint64(d) }

// Send runs one packet through the host's program at the shared clock and
// reports whether it was admitted (XDP_PASS).
func (h *Host) Send(pkt []byte) (bool, error) {
	if h.clock != h.f.now {
		if err := h.L.SetClock(h.f.now); err != nil {
			return false, err
		}
		h.clock = h.f.now
	}
	ret, err := h.L.Program().Run(&ebpf.RunOptions{Data: pkt, Repeat: 1})
	if err != nil {
		return false, err
	}
	return ret == 2, nil // XDP_PASS
}

// SyncAll runs one sync on every host, in order, at the shared clock.
func (f *Fleet) SyncAll(ctx context.Context) error {
	for i, h := range f.Hosts {
		if r := h.E.Sync(ctx); r.Err != nil {
			return fmt.Errorf("host %d: sync: %w", i, r.Err)
		}
	}
	return nil
}

// Flood is one source's traffic over a simulated span.
type Flood struct {
	// Senders are the hosts the source's packets reach, evenly: the
	// packets of each millisecond go to them in turn.
	Senders []int
	Packet  []byte
	// PerMs is the packets the source sends per simulated millisecond, all
	// senders together.
	PerMs    int
	Duration time.Duration
	// Sync is the interval at which every host syncs (all at once).
	Sync time.Duration
}

// Run advances the clock over fl.Duration in 1 ms steps, sending each
// step's packets at its start and syncing every fl.Sync. It returns the
// packets each host admitted.
func (f *Fleet) Run(ctx context.Context, fl Flood) ([]int, error) {
	if len(fl.Senders) == 0 || fl.Sync < time.Millisecond {
		return nil, errors.New("fleetsim: a flood needs senders and a sync of at least 1 ms")
	}
	admitted := make([]int, len(f.Hosts))
	syncEvery := int64(fl.Sync / time.Millisecond)
	next := 0 // the sender of the next packet
	for ms := int64(0); ms < int64(fl.Duration/time.Millisecond); ms++ {
		for range fl.PerMs {
			i := fl.Senders[next]
			next = (next + 1) % len(fl.Senders)
			ok, err := f.Hosts[i].Send(fl.Packet)
			if err != nil {
				return admitted, fmt.Errorf("host %d: %w", i, err)
			}
			if ok {
				admitted[i]++
			}
		}
		f.Advance(time.Millisecond)
		if (ms+1)%syncEvery == 0 {
			if err := f.SyncAll(ctx); err != nil {
				return admitted, err
			}
			if err := ctx.Err(); err != nil {
				return admitted, err
			}
		}
	}
	return admitted, nil
}

// Sum adds up per-host counts.
func Sum(v []int) int {
	s := 0
	for _, x := range v {
		s += x
	}
	return s
}
