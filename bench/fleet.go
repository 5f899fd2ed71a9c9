// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/xdplimit/xdplimit/internal/harness/fleetsim"
	"github.com/xdplimit/xdplimit/internal/harness/redisproc"
	"github.com/xdplimit/xdplimit/pktgen"
	"github.com/xdplimit/xdplimit/policy"
)

// The fleet section: how closely a fleet of hosts holds one
// token-bucket limit through Redis, and what one sync costs as the number
// of active keys grows. The datapath cost of a fleet level is measured with
// the micro cases.

// The fleet accuracy limit: the source floods at 10x it.
const (
	fleetRate  = 1000 // per second
	fleetBurst = 200
	fleetFlood = 10 // x the fleet limit
)

type fleetAccuracy struct {
	hosts, senders int
	sync           time.Duration
	global         bool
	admitted       int
	perHost        []int
	err            string
}

// configured is what the fleet limit admits of the flood: burst + rate x t.
func (a *fleetAccuracy) configured(d time.Duration) float64 {
	return fleetBurst + fleetRate*d.Seconds()
}

func (a *fleetAccuracy) ratio(d time.Duration) float64 {
	return float64(a.admitted) / a.configured(d)
}

// bound is the design's upper bound on the ratio: each of N hosts may run
// up to one sync interval of the rate ahead of the others
// (policy.Fleet.bound).
func (a *fleetAccuracy) bound(d time.Duration) float64 {
	return 1 + float64(a.hosts)*fleetRate*a.sync.Seconds()/a.configured(d)
}

func (a *fleetAccuracy) label() string {
	key := "per source"
	if a.global {
		key = "global"
	}
	who := "flooding all hosts evenly"
	if a.senders == 1 {
		who = "**sending to one host only**"
	}
	return fmt.Sprintf("%s, %s", key, who)
}

type fleetResults struct {
	Duration time.Duration // simulated flood per case
	Accuracy []*fleetAccuracy
	Sync     []*syncCost
	SyncRuns int
	Ring     int // reports the datapath's key ring holds
}

func (r *fleetResults) find(hosts, senders int, sync time.Duration, global bool) *fleetAccuracy {
	for _, a := range r.Accuracy {
		if a.hosts == hosts && a.senders == senders && a.sync == sync && a.global == global {
			return a
		}
	}
	return nil
}

// startRedis starts a redis-server on the loopback of a namespace of the
// run's own; the run's end stops it and deletes the namespace.
func (e *env) startRedis() (*redisproc.Server, error) {
	ns, err := e.newNetns()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "xdplbench-redis-")
	if err != nil {
		return nil, err
	}
	e.atClose(func() { os.RemoveAll(dir) })
	s, err := redisproc.New(ns, redisproc.Config{Addr: netip.MustParseAddrPort("127.0.0.1:6379"), Dir: dir})
	if err != nil {
		return nil, err
	}
	e.atClose(func() {
		if err := s.Stop(); err != nil {
			e.Logf("stop redis-server: %v", err)
		}
	})
	return s, s.Start()
}

var fleetRun int // numbers the Redis namespaces of a run's policies

// fleetPolicy is one UDP rule with a fleet limit.
func fleetPolicy(redisAddr string, sync time.Duration, limit string) string {
	fleetRun++
	return fmt.Sprintf(`fleet:
  redis: redis://%s/0
  namespace: bench%d-%d
  sync: %v
rules:
  - name: dns
    match: {protocol: udp, dst_ports: [53]}
    limit: %s
`, redisAddr, os.Getpid(), fleetRun, sync, limit)
}

func fleetBench(e *env, quick bool) (*fleetResults, error) {
	res := &fleetResults{Duration: 10 * time.Second, SyncRuns: 3}
	sizes := []int{1000, 100_000, 1_000_000}
	if quick {
		res.Duration, res.SyncRuns, sizes = 3*time.Second, 1, []int{1000, 100_000}
	}
	srv, err := e.startRedis()
	if err != nil {
		return res, err
	}
	syncs := []time.Duration{20 * time.Millisecond, 100 * time.Millisecond, time.Second}
	for _, sync := range syncs {
		for _, n := range []int{2, 3, 5} {
			res.Accuracy = append(res.Accuracy, &fleetAccuracy{hosts: n, senders: n, sync: sync})
		}
		res.Accuracy = append(res.Accuracy, &fleetAccuracy{hosts: 3, senders: 1, sync: sync})
	}
	res.Accuracy = append(res.Accuracy,
		&fleetAccuracy{hosts: 3, senders: 3, sync: 100 * time.Millisecond, global: true},
		&fleetAccuracy{hosts: 3, senders: 1, sync: 100 * time.Millisecond, global: true})
	for _, a := range res.Accuracy {
		e.Logf("fleet: %d hosts, sync %v, %s", a.hosts, a.sync, a.label())
		if err := a.run(e, srv, res.Duration); err != nil {
			a.err = errString(err)
			e.Logf("fleet: %v", err)
		}
		if err := e.ctx.Err(); err != nil {
			return res, err
		}
	}
	var costs []*syncCost
	for _, k := range sizes {
		costs = append(costs, &syncCost{keys: k, interval: syncCostInterval})
	}
	// The same at the default interval, whose shorter read bound decides
	// how many keys a sync can carry.
	for _, k := range []int{10_000, 100_000} {
		costs = append(costs, &syncCost{keys: k, interval: policy.DefaultFleetSync})
	}
	for _, c := range costs {
		res.Sync = append(res.Sync, c)
		e.Logf("fleet: sync cost at %d active keys, sync %v", c.keys, c.interval)
		if err := c.measure(e, srv, res.SyncRuns); err != nil {
			c.err = errString(err)
			e.Logf("fleet: %v", err)
		}
		res.Ring = c.ring
		if err := e.ctx.Err(); err != nil {
			return res, err
		}
	}
	return res, nil
}

// run floods a simulated fleet (internal/harness/fleetsim.Fleet: the real program with an
// injected clock on each host, the real engines, the real Redis) and counts
// what the fleet admitted.
func (a *fleetAccuracy) run(e *env, srv *redisproc.Server, d time.Duration) error {
	limit := fmt.Sprintf("{algorithm: token_bucket, rate: %d/s, burst: %d, scope: fleet}", fleetRate, fleetBurst)
	if a.global {
		limit += "\n    key: global"
	}
	f, err := fleetsim.New(fleetsim.Config{Hosts: a.hosts, Policy: fleetPolicy(srv.Addr(), a.sync, limit),
		Dial: redisproc.DialIn(srv.NS())})
	if err != nil {
		return err
	}
	defer f.Close()
	senders := make([]int, a.senders)
	for i := range senders {
		senders[i] = i
	}
	pkt := pktgen.UDP4(netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("192.0.2.1"), 4000, 53, 18)
	got, err := f.Run(e.ctx, fleetsim.Flood{Senders: senders, Packet: pkt, PerMs: fleetFlood * fleetRate / 1000,
		Duration: d, Sync: a.sync})
	if err != nil {
		return err
	}
	a.perHost, a.admitted = got, fleetsim.Sum(got)
	return nil
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, " + ")
}
