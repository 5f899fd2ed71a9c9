// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/xdplimit/xdplimit/internal/harness/fleetsim"
	"github.com/xdplimit/xdplimit/internal/harness/redisproc"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

// The fleet at a million sources: three simulated hosts (the real program
// with an injected clock, the real engines, one real redis-server), each
// walking 2^20 light sources at one packet a second, and 1,000 heavy
// sources each at three times the fleet limit spread evenly over the three
// hosts. The heavy sources change halfway. Run with local shares (the
// default) and with share: off, every key exchanged (the design before), on
// the same load.
const (
	scaleSources = 1 << 20
	scaleHeavy   = 1000
	scaleRate    = 100 // per second, per source, the fleet's
	scaleBurst   = 100
	scaleSync    = 100 * time.Millisecond
	scaleStep    = 10 * time.Millisecond // heavy packets: one per host per step
	lcgA, lcgC   = 1103515245, 12345     // bench.h's rotation
)

type fleetScale struct {
	design   string // "local shares" or "share off"
	extra    string // the fleet: section's share lines
	dur      time.Duration
	moveAt   time.Duration // the heavy sources change (0: never)
	syncs    int
	slow     int    // syncs that took longer than the interval
	wall     sample // seconds per sync
	exch     sample // keys exchanged per sync and host
	unsynced int
	redisCPU float64 // seconds, the whole run
	// Per heavy source: admitted over its period / (burst + rate x period);
	// the second set's first second / the same over one second.
	heavy, moved, firstSecond sample
	lightSent, lightRefused   int
	err                       string
}

func (s *fleetScale) label() string { return s.design }

// lcgNext is the rotation's step; lcgPrev its inverse.
func lcgNext(x uint32) uint32 { return (x*lcgA + lcgC) & (scaleSources - 1) }

func lcgPrev(y uint32) uint32 {
	// a's inverse modulo 2^32 by Newton's iteration; then modulo 2^20.
	inv := uint32(lcgA)
	for range 5 {
		inv *= 2 - lcgA*inv
	}
	return ((y - lcgC) * inv) & (scaleSources - 1)
}

// scaleRig is one run: the fleet, the frames, and where each host's walk
// of the light sources is.
type scaleRig struct {
	e     *env
	f     *fleetsim.Fleet
	base  netip.Addr
	walk  []uint32 // each host's next light source's offset
	heavy [][]byte // the frames that come out as the heavy sources
	isHot map[uint32]bool
}

func (s *fleetScale) run(e *env, srv *redisproc.Server) error {
	base := netip.MustParseAddr("10.0.0.0")
	yaml := fleetPolicy(srv.Addr(), scaleSync, fmt.Sprintf(
		"{algorithm: token_bucket, rate: %d/s, burst: %d, scope: fleet}", scaleRate, scaleBurst))
	yaml = s.withShare(yaml)
	f, err := fleetsim.New(fleetsim.Config{Hosts: 3, Policy: yaml, Dial: redisproc.DialIn(srv.NS()),
		MaxSources: 2 * scaleSources, BenchRotate: scaleSources, BenchBase: base, TrackAfter: 1, Logf: e.Logf})
	if err != nil {
		return err
	}
	defer f.Close()
	rig := &scaleRig{e: e, f: f, base: base, walk: []uint32{0, scaleSources / 3, 2 * scaleSources / 3}}
	// The attach process syncs once when it starts, before the traffic
	// it meets: the hosts know the fleet from the first packet.
	if err := rig.syncAll(s); err != nil {
		return err
	}
	cpu0 := procCPU(srv.PID())
	second := s.dur
	if s.moveAt > 0 {
		second = s.moveAt
	}
	first, err := rig.phase(s, 0, second)
	if err != nil {
		return err
	}
	s.heavy = ratios(first.admitted, second)
	if s.moveAt > 0 {
		next, err := rig.phase(s, 7919, s.dur-s.moveAt)
		if err != nil {
			return err
		}
		s.moved = ratios(next.admitted, s.dur-s.moveAt)
		s.firstSecond = ratios(next.firstSecond, time.Second)
	}
	s.redisCPU = procCPU(srv.PID()) - cpu0
	return nil
}

func (s *fleetScale) withShare(yaml string) string {
	if s.extra == "" {
		return yaml
	}
	i := len("fleet:\n")
	return yaml[:i] + s.extra + yaml[i:]
}

func ratios(admitted []int, d time.Duration) sample {
	var out sample
	bound := scaleBurst + scaleRate*d.Seconds()
	for _, n := range admitted {
		out = append(out, float64(n)/bound)
	}
	return out
}

// phaseResult is what a phase's heavy sources were admitted.
type phaseResult struct{ admitted, firstSecond []int }

// phase runs d of traffic with the heavy sources numbered from seed.
func (rig *scaleRig) phase(s *fleetScale, seed uint32, d time.Duration) (*phaseResult, error) {
	// isHot keeps the previous heavy sources: their debt in the fleet's
	// buckets outlasts their flood by up to a burst, and the walk visits
	// them too.
	rig.heavy = rig.heavy[:0]
	if rig.isHot == nil {
		rig.isHot = map[uint32]bool{}
	}
	for i := range uint32(scaleHeavy) {
		y := (seed + i*1021 + 1) & (scaleSources - 1)
		rig.heavy = append(rig.heavy, rig.frame(lcgPrev(y)))
		rig.isHot[y] = true
	}
	res := &phaseResult{admitted: make([]int, scaleHeavy), firstSecond: make([]int, scaleHeavy)}
	start := rig.f.Now()
	for at := time.Duration(0); at < d; at += scaleStep {
		for hi := range rig.f.Hosts {
			for k, fr := range rig.heavy {
				ok, err := rig.f.Hosts[hi].Send(fr)
				if err != nil {
					return nil, err
				}
				if ok {
					res.admitted[k]++
					if rig.f.Now()-start < uint64(time.Second) {
						res.firstSecond[k]++
					}
				}
			}
		}
		rig.f.Advance(scaleStep)
		if (at+scaleStep)%scaleSync == 0 {
			if err := rig.light(s); err != nil {
				return nil, err
			}
			if err := rig.syncAll(s); err != nil {
				return nil, err
			}
			if err := rig.e.ctx.Err(); err != nil {
				return nil, err
			}
		}
	}
	return res, nil
}

// frame is the light walk's frame whose first packet comes out as the
// source at offset lcgNext(x).
func (rig *scaleRig) frame(x uint32) []byte {
	a := rig.base.As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3]) + x
	src := netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	return pktgen.UDP4(src, netip.MustParseAddr("192.0.2.1"), 4000, 53, 18)
}

// light sends each host a sync's worth of its walk (a tenth of the
// sources: each one packet a second), and counts what the rule refused of
// them.
func (rig *scaleRig) light(s *fleetScale) error {
	n := int(scaleSources * scaleSync / time.Second)
	for hi, h := range rig.f.Hosts {
		before, err := ruleDrops(h.L)
		if err != nil {
			return err
		}
		if err := h.L.SetClock(rig.f.Now()); err != nil {
			return err
		}
		if _, _, err := h.L.Program().Benchmark(rig.frame(rig.walk[hi]), n, nil); err != nil {
			return err
		}
		after, err := ruleDrops(h.L)
		if err != nil {
			return err
		}
		visits := 0
		for range n {
			rig.walk[hi] = lcgNext(rig.walk[hi])
			if rig.isHot[rig.walk[hi]] {
				visits++
			}
		}
		s.lightSent += n - visits
		s.lightRefused += max(int(after-before)-visits, 0)
	}
	return nil
}

func ruleDrops(l *maps.Limiter) (uint64, error) {
	rs, err := l.RuleStats()
	if err != nil {
		return 0, err
	}
	var n uint64
	for _, r := range rs {
		for _, d := range r.LevelDrops {
			n += d
		}
	}
	return n, nil
}

func (rig *scaleRig) syncAll(s *fleetScale) error {
	for i, h := range rig.f.Hosts {
		start := time.Now()
		r := h.E.Sync(context.Background())
		w := time.Since(start)
		if r.Err != nil {
			return fmt.Errorf("host %d: sync: %w", i, r.Err)
		}
		s.syncs++
		s.wall = append(s.wall, w.Seconds())
		if w > scaleSync {
			s.slow++
		}
		s.exch = append(s.exch, float64(r.Exchanged))
		s.unsynced += r.Unsynced
	}
	return nil
}
