// SPDX-License-Identifier: Apache-2.0

// Package fleet holds limits for a whole fleet of hosts through Redis. The
// datapath never waits for it: each host enforces from its own BPF state,
// and every sync interval the engine exchanges what the host admitted for
// each fleet key that admitted anything, and folds what the other hosts
// admitted into the local state (docs/design.md, "Fleet limits").
package fleet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/banfeed"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/policy"
)

// Datapath is the local side of the sync: the limiter's fleet maps and
// its apply program (maps.Limiter).
type Datapath interface {
	FleetLevels() ([]maps.FleetLevel, error)
	FleetEpoch() (uint32, error)
	SetFleetEpoch(uint32) error
	SetFleetReserves(map[uint32]uint64) error
	SetFleetShares(map[uint32]maps.FleetShare) error
	FleetRun([]maps.FleetOp) error
	DrainFleetKeys(max int, fn func(maps.FleetKey)) (int, error)
}

// Options configure an engine. Only Fleet is required.
type Options struct {
	Fleet    *policy.Fleet
	Password string
	// Interface labels metrics and messages.
	Interface string
	// Logf reports changes of state (one line each, never one per sync).
	Logf func(format string, args ...any)
	// Now is the datapath's clock in ns (default CLOCK_MONOTONIC, which
	// both of the datapath's clocks follow).
	Now func() uint64
	// Wall is the wall clock in ns (default CLOCK_REALTIME): fixed windows
	// are numbered by it. Token buckets use the Redis server's clock
	// unless RedisUs is set.
	Wall func() int64
	// RedisUs, when set, replaces the Redis server's TIME for token
	// buckets (tests with injected time).
	RedisUs func() float64
	// HostID names this host in the fleet's list of live hosts (default
	// hostname/interface).
	HostID string
	// Dialer, when set, opens the connections to Redis (tests dial from
	// another network namespace with it).
	Dialer func(ctx context.Context, network, addr string) (net.Conn, error)
	// MaxKeys bounds the keys exchanged per sync (default DefaultMaxKeys):
	// past it, the heaviest go first and the rest are counted as unsynced.
	MaxKeys int
}

// DefaultMaxKeys is the default bound on keys exchanged per sync.
const DefaultMaxKeys = 200000

// Engine runs the sync of one interface's fleet levels.
type Engine struct {
	opts   Options
	dp     Datapath
	client redis.UniversalClient
	m      *Metrics

	mu       sync.Mutex
	levels   map[uint32]*level // by state id, the levels in force
	epoch    uint32
	recentTB map[maps.FleetKey]*level // token-bucket keys taken last sync
	fw       map[maps.FleetKey]*fwKey
	link     linkState
	reports  reports
	lastSync uint64 // datapath clock at the previous sync's take
	// span is the time between the last two syncs' takes, at least the
	// interval (4 intervals at most): how far apart syncs really are.
	span     time.Duration
	hosts    int // live hosts Redis last reported (1 until it does)
	reserves map[uint32]uint64
	// known: an exchange has told the live hosts, which the token buckets'
	// local shares divide the limit by (share.go).
	known     bool
	shares    map[uint32]maps.FleetShare
	hot       map[maps.FleetKey]*hotKey // token-bucket keys in the exchange
	hotCursor string                    // the last entry read from the fleet's stream
	tls       bool                      // the URLs are rediss://
	// knownBans: the bans this host and Redis agreed on at the last
	// sync, by prefix, with their expiry in wall-clock ms (bans.go).
	knownBans map[netip.Prefix]int64
	bans      *banfeed.Gate           // what the ban hash may make this host ban
	banCursor string                  // where the next read of a large ban hash goes on
	wideBans  map[netip.Prefix]string // local bans the other hosts would refuse, logged
}

// New makes an engine; it connects on its first sync. The levels in force
// are read from the datapath now and again after every Reload.
func New(opts Options, dp Datapath) (*Engine, error) {
	if opts.Fleet == nil {
		return nil, errors.New("fleet: no fleet: section")
	}
	if opts.Now == nil {
		opts.Now = monotonicNs
	}
	if opts.Wall == nil {
		opts.Wall = func() int64 { return time.Now().UnixNano() }
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if opts.MaxKeys <= 0 {
		opts.MaxKeys = DefaultMaxKeys
	}
	if opts.HostID == "" {
		h, _ := os.Hostname()
		opts.HostID = h + "/" + opts.Interface
	}
	c, err := newClient(opts.Fleet, opts.Password, opts.Dialer)
	if err != nil {
		return nil, err
	}
	e := &Engine{opts: opts, dp: dp, client: c, m: NewMetrics(opts.Interface),
		recentTB: map[maps.FleetKey]*level{}, fw: map[maps.FleetKey]*fwKey{}, hosts: 1, banCursor: "0",
		hot: map[maps.FleetKey]*hotKey{}}
	e.bans = banfeed.NewGate(banSource, e.m.bans, opts.Logf)
	for _, u := range opts.Fleet.Redis {
		e.tls = e.tls || strings.HasPrefix(u, "rediss://")
	}
	e.link.init(opts.Fleet.Sync, e.tls)
	if err := e.Reload(); err != nil {
		c.Close()
		return nil, err
	}
	// A state entry starts with epoch bits 0: in epoch 0 its first
	// admissions would not report it, and its pending units would wait
	// for a later epoch, then be charged to Redis as if admitted within
	// one sync span (measured: a fleet at sync 1s admitted 2x its limit
	// in the first seconds, and a lone host was then held back a whole
	// interval). A new epoch from the start makes them report: the one
	// after the epoch in force (an engine restarted by a reload, or an
	// attach adopting pinned state, finds entries marked with it), and
	// never 0 in the 16 bits entries keep. A failure here fails the first
	// sync again, which counts and logs it.
	cur, _ := dp.FleetEpoch()
	e.epoch = nextEpoch(cur)
	_ = dp.SetFleetEpoch(e.epoch)
	return e, nil
}

// Close releases the Redis connections and the fixed windows' reserves:
// without a sync nothing would release them, and the datapath then
// enforces each limit locally. The token buckets' shares stay: they only
// decide which keys report, and the next engine starts from them.
func (e *Engine) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return errors.Join(e.dp.SetFleetReserves(nil), e.client.Close())
}

// Metrics is the engine's Prometheus collectors.
func (e *Engine) Metrics() *Metrics { return e.m }

// Reload re-reads the fleet levels in force, after a policy reload. Keys of
// levels that are gone are forgotten; kept levels keep their keys.
func (e *Engine) Reload() error {
	fls, err := e.dp.FleetLevels()
	if err != nil {
		return fmt.Errorf("fleet: reading the levels in force: %w", err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.levels = make(map[uint32]*level, len(fls))
	for _, fl := range fls {
		lv := newLevel(fl)
		e.levels[fl.StateID] = &lv
	}
	for k := range e.recentTB {
		if e.levels[k.StateID] == nil {
			delete(e.recentTB, k)
		}
	}
	for k := range e.fw {
		if e.levels[k.StateID] == nil {
			delete(e.fw, k)
		}
	}
	for k, h := range e.hot {
		if lv := e.levels[k.StateID]; lv == nil {
			delete(e.hot, k)
		} else {
			h.lv = lv
		}
	}
	e.m.levels.Set(float64(len(e.levels)))
	if err := e.setShares(e.known); err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	return e.setReserves(e.link.up || e.opts.Fleet.Fallback == policy.FallbackShare)
}

// Sync runs one sync: take what the datapath admitted, exchange it with
// Redis (unless Redis is down and its retry is not due), fold what the
// other hosts admitted. Errors are counted and logged on a change of state,
// and never stop the datapath: it keeps enforcing from its own state.
func (e *Engine) Sync(ctx context.Context) SyncResult {
	start := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	var bans *banPrefetch
	if bt, ok := e.dp.(BanTable); ok {
		bans = &banPrefetch{bt: bt}
	}
	res, err := e.sync(ctx, bans)
	if bans.started() && err == nil && !res.Skipped {
		xctx, cancel := context.WithTimeout(ctx, syncDeadline(e.opts.Fleet.Sync, 0))
		err = e.syncBans(xctx, bans)
		cancel()
	}
	if err != nil && ctx.Err() != nil {
		res.Err = err // stopped mid-sync: not a sync error
	} else if err != nil {
		kind, _ := classify(err, e.tls)
		if errors.Is(err, errDatapath) {
			kind = KindDatapath
		}
		res.Err, res.Kind = err, kind
		e.m.errors.WithLabelValues(string(kind)).Inc()
	}
	e.m.duration.Observe(time.Since(start).Seconds())
	e.m.syncs.Inc()
	e.m.exchanged.Add(float64(res.Exchanged))
	e.m.unsynced.Add(float64(res.Unsynced))
	return res
}

// SyncResult is what one sync did, for tests and `status`.
type SyncResult struct {
	Reported  int // keys the datapath reported
	Exchanged int // keys exchanged with Redis
	Unsynced  int // keys over MaxKeys, not exchanged
	Folded    int // keys whose state moved for other hosts' admissions
	Skipped   bool
	Err       error
	Kind      ErrorKind
}

var errDatapath = errors.New("datapath")

func fmtUs(us float64) string { return fmt.Sprintf("%.3f", us) }

func monotonicNs() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

func msDuration(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }

// nextEpoch is the epoch after e, skipping those whose low bits (what a
// state entry keeps) are 0: a marked entry's before its first report.
func nextEpoch(e uint32) uint32 {
	e++
	if e&(1<<maps.FleetEpochBits-1) == 0 {
		e++
	}
	return e
}

// syncDeadline bounds one exchange: ten intervals (1 to 5 s), plus 50 us per
// key, up to 30 s. One Redis core exchanges about 70k keys a second
// (BENCHMARKS.md): a sync of 100k keys takes over a second whatever the
// interval, and a deadline that does not grow with the keys failed it every
// time, so those keys were never synced. A lost Redis is still found out
// within the first term when a sync has few keys.
func syncDeadline(sync time.Duration, keys int) time.Duration {
	d := min(max(10*sync, time.Second), 5*time.Second)
	return min(d+time.Duration(keys)*50*time.Microsecond, 30*time.Second)
}
