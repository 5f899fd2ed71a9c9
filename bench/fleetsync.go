// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/fleet"
	"github.com/xdplimit/xdplimit/gen"
	"github.com/xdplimit/xdplimit/internal/harness/redisproc"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

// The cost of one sync with k active keys: k sources each admitted one
// packet since the last sync, on one host (the real program, real clock)
// with a real engine and Redis. The cost is measured at the longest sync
// interval allowed, so that the engine's exchange deadline (twice the
// interval) is not what ends a big sync; its socket reads are still
// bounded (2 s at most). Rows at the default interval show where its
// shorter bounds stop a sync.
const syncCostInterval = 10 * time.Second

type syncCost struct {
	keys     int
	interval time.Duration // the policy's sync
	ring     int           // reports the datapath's key ring holds

	wall, cpu, redisCPU sample // seconds per sync
	tx, rx, ops         sample // bytes to and from Redis, commands Redis ran
	reported, exchanged sample
	unsynced, lost      sample // over MaxKeys; reports the ring had no room for in the round
	err                 string
}

// byteCounter counts the bytes of every connection a dialer opens.
type byteCounter struct{ tx, rx atomic.Int64 }

type countedConn struct {
	net.Conn
	c *byteCounter
}

func (c countedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.c.rx.Add(int64(n))
	return n, err
}

func (c countedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.c.tx.Add(int64(n))
	return n, err
}

func (b *byteCounter) wrap(dial func(context.Context, string, string) (net.Conn, error)) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countedConn{conn, b}, nil
	}
}

// ringReports is how many key reports the datapath's ring holds at once
// (a record is the key and the ring's 8-byte header).
func ringReports() int {
	spec, err := gen.LoadXdplimit()
	if err != nil {
		return 0
	}
	m := spec.Maps["xdpl_fleet_keys"]
	if m == nil {
		return 0
	}
	return int(m.MaxEntries) / (24 + 8)
}

func nextPow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}

// snapshot is the counters a sync moves.
type snapshot struct {
	cpu, redisCPU float64
	tx, rx        int64
	ops           int64
	lost          uint64
}

func (c *syncCost) measure(e *env, srv *redisproc.Server, runs int) error {
	c.ring = ringReports()
	rig, err := newSyncRig(e, srv, c.keys, c.interval)
	if err != nil {
		return err
	}
	defer rig.close()
	// A sync of one key loads the script (a sync that finds Redis without
	// it sends its pipeline twice), a first round creates the keys and a
	// first sync exchanges them.
	for _, k := range []int{1, c.keys} {
		if err := rig.round(k); err != nil {
			return err
		}
		if r := rig.eng.Sync(e.ctx); r.Err != nil {
			return fmt.Errorf("first sync of %d keys: %w", k, r.Err)
		}
	}
	for range runs {
		if err := c.once(rig); err != nil {
			return err
		}
		if err := e.ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

// once admits a packet of every key and times the sync that follows.
func (c *syncCost) once(rig *syncRig) error {
	// Reports are lost while the packets run: count from before.
	pre, err := rig.take()
	if err != nil {
		return err
	}
	if err := rig.round(c.keys); err != nil {
		return err
	}
	before, err := rig.take()
	if err != nil {
		return err
	}
	start := time.Now()
	r := rig.eng.Sync(rig.e.ctx)
	wall := time.Since(start)
	if r.Err != nil {
		return fmt.Errorf("sync of %d keys after %v: %w", r.Reported, wall.Round(time.Millisecond), r.Err)
	}
	after, err := rig.take()
	if err != nil {
		return err
	}
	c.wall = append(c.wall, wall.Seconds())
	c.cpu = append(c.cpu, after.cpu-before.cpu)
	c.redisCPU = append(c.redisCPU, after.redisCPU-before.redisCPU)
	c.tx = append(c.tx, float64(after.tx-before.tx))
	c.rx = append(c.rx, float64(after.rx-before.rx))
	// The second INFO counts the first.
	c.ops = append(c.ops, float64(after.ops-before.ops-1))
	c.reported = append(c.reported, float64(r.Reported))
	c.exchanged = append(c.exchanged, float64(r.Exchanged))
	c.unsynced = append(c.unsynced, float64(r.Unsynced))
	c.lost = append(c.lost, float64(after.lost-pre.lost))
	return nil
}

// syncRig is one host of a fleet: the program walking keys sources at
// fleet scope, its engine syncing with srv through a dialer that counts
// bytes, and a client of its own to read Redis's counters.
type syncRig struct {
	e     *env
	srv   *redisproc.Server
	l     *maps.Limiter
	eng   *fleet.Engine
	info  *redis.Client
	bytes byteCounter
	frame []byte
}

func newSyncRig(e *env, srv *redisproc.Server, keys int, interval time.Duration) (rig *syncRig, err error) {
	rot := nextPow2(keys)
	yaml := fleetPolicy(srv.Addr(), interval,
		"{algorithm: token_bucket, rate: 1000/s, burst: 1000, scope: fleet}")
	base := netip.MustParseAddr("10.0.0.0")
	img, p, err := compilePolicy(yaml, nil)
	if err != nil {
		return nil, err
	}
	// Each call walks the same keys sources from the frame's: every key
	// admits one packet per round.
	rig = &syncRig{e: e, srv: srv, frame: pktgen.UDP4(base, netip.MustParseAddr("192.0.2.1"), 4000, 53, 18)}
	defer func() {
		if err != nil {
			rig.close()
		}
	}()
	// TrackAfter 1: every source gets its entry at its first packet.
	if rig.l, err = loadImage(maps.Options{Clock: maps.ClockCoarse, MaxSources: uint32(2 * rot),
		BenchRotate: uint32(rot), BenchBase: base, TrackAfter: 1}, img); err != nil {
		return nil, err
	}
	if rig.eng, err = fleet.New(fleet.Options{Fleet: p.Fleet, Interface: "bench", Logf: e.Logf,
		Dialer: rig.bytes.wrap(redisproc.DialIn(srv.NS()))}, rig.l); err != nil {
		return nil, err
	}
	rig.info = redis.NewClient(redisproc.FastFailOptions(srv.NS(), "", srv.Addr()).Simple())
	return rig, nil
}

// close closes what newSyncRig opened, the client first and the limiter last.
func (rig *syncRig) close() {
	if rig.info != nil {
		rig.info.Close()
	}
	if rig.eng != nil {
		rig.eng.Close()
	}
	if rig.l != nil {
		rig.l.Close()
	}
}

// round runs keys packets, one for each of the first keys sources.
func (rig *syncRig) round(keys int) error {
	_, _, err := rig.l.Program().Benchmark(rig.frame, keys, nil)
	return err
}

// take reads the counters a sync moves.
func (rig *syncRig) take() (snapshot, error) {
	var s snapshot
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return s, err
	}
	s.cpu = tvSec(ru.Utime) + tvSec(ru.Stime)
	s.redisCPU = procCPU(rig.srv.PID())
	s.tx, s.rx = rig.bytes.tx.Load(), rig.bytes.rx.Load()
	ops, err := commandsProcessed(rig.e.ctx, rig.info)
	if err != nil {
		return s, err
	}
	s.ops = ops
	cs, err := rig.l.Counters()
	if err != nil {
		return s, err
	}
	s.lost = cs[maps.CounterFleetLost].Packets
	return s, nil
}

func tvSec(tv unix.Timeval) float64 { return float64(tv.Sec) + float64(tv.Usec)/1e6 }

// procCPU is a process's user + system time in seconds (/proc resolves it
// to the scheduler tick, 10 ms here).
func procCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	rest := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(rest) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(rest[11], 64)
	st, _ := strconv.ParseFloat(rest[12], 64)
	return (ut + st) / 100 // USER_HZ
}

// commandsProcessed is Redis's count of the commands it ran.
func commandsProcessed(ctx context.Context, c *redis.Client) (int64, error) {
	s, err := c.Info(ctx, "stats").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_commands_processed:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("INFO stats has no total_commands_processed")
}
