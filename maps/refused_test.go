// SPDX-License-Identifier: Apache-2.0

package maps_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/model"
	"github.com/xdplimit/xdplimit/pktgen"
)

// refusedHits reads how many packets the refused-until cache and the flow
// cache in front of it refused.
func refusedHits(t *testing.T, l *maps.Limiter) uint64 {
	t.Helper()
	cs, err := l.Counters()
	if err != nil {
		t.Fatal(err)
	}
	return cs[maps.CounterRefusedCached].Packets + cs[maps.CounterFlowCached].Packets
}

// TestRefusedCacheAgreement replays dense floods (most packets refused, so
// the per-CPU refused-until cache and the flow cache in front of it answer
// most of them) through the program
// with the cache on and off and through the Go models, and requires the
// same verdict for every packet; with the cache on it must have answered
// some, with it off none. Each algorithm is tried as a rule's only level and
// behind a global aggregate (two phases, the global level first).
func TestRefusedCacheAgreement(t *testing.T) {
	tb := func(rate, burst uint64) refusedLimit {
		p, err := model.TokenBucketParams(rate, time.Second, burst, false)
		if err != nil {
			t.Fatal(err)
		}
		return refusedLimit{fmt.Sprintf("{algorithm: token_bucket, rate: %d/s, burst: %d}", rate, burst), p}
	}
	win := func(alg uint8, name string, n uint64, w time.Duration) refusedLimit {
		p, err := model.WindowParams(alg, n, w)
		if err != nil {
			t.Fatal(err)
		}
		return refusedLimit{fmt.Sprintf("{algorithm: %s, packets: %d, window: %v}", name, n, w), p}
	}
	for _, c := range []struct {
		name string
		own  refusedLimit
		// mean gap between packets; a tenth of the limit's pace or less
		gap time.Duration
	}{
		{"token_bucket", tb(200, 5), 500 * time.Microsecond},
		{"fixed_window", win(model.AlgFixedWindow, "fixed_window", 7, 30*time.Millisecond), 400 * time.Microsecond},
		{"sliding_window", win(model.AlgSlidingWindow, "sliding_window", 9, 40*time.Millisecond), 400 * time.Microsecond},
		{"sliding_window_1", win(model.AlgSlidingWindow, "sliding_window", 1, 3*time.Millisecond), 100 * time.Microsecond},
	} {
		for _, global := range []bool{false, true} {
			f := refusedFlood{name: c.name, own: c.own, gap: c.gap}
			if global {
				f.name += "+global"
				gl := tb(1500, 40)
				f.global = &gl
			}
			t.Run(f.name, func(t *testing.T) {
				testutil.PinCPU(t, 0) // the cache is per CPU
				for _, off := range []bool{false, true} {
					f.check(t, off)
				}
			})
		}
	}
}

// refusedLimit is a limit as the policy writes it and as the model runs it.
type refusedLimit struct {
	yaml   string
	params model.Params
}

// refusedFlood is a case of TestRefusedCacheAgreement: a rule's own level,
// behind a global aggregate when global is set, under a dense flood.
type refusedFlood struct {
	name   string
	own    refusedLimit
	global *refusedLimit
	gap    time.Duration
}

// check replays the flood through the program, the refused-until cache
// off or on, and through the models, packet by packet, then checks how
// many packets the caches answered.
func (f refusedFlood) check(t *testing.T, off bool) {
	agg := ""
	if f.global != nil {
		agg = "    aggregate:\n      - key: global\n        limit: " + f.global.yaml + "\n"
	}
	yaml := "rules:\n  - name: r\n    limit: " + f.own.yaml + "\n" + agg
	l := loadWith(t, maps.Options{Clock: maps.ClockMap, TrackAfter: 1, NoRefusedCache: off}, yaml)
	srcs := []pktgen.Frame{udp4("192.0.2.1"), udp4("192.0.2.2"), udp6("2001:db8::1"), udp4("192.0.2.3")}
	own := make([]model.State, len(srcs))
	var gs model.State
	r := rand.New(rand.NewPCG(7, uint64(len(f.name))))
	now := uint64(t0)
	for i := 0; i < 4000; i++ {
		s := r.IntN(len(srcs))
		switch k := r.IntN(200); {
		case k == 0:
			now += r.Uint64N(uint64(time.Second))
		case k < 16:
			// Right at the edge of a refusal: the
			// cache's until must be exact to the ns.
			at := firstAdmit(own[s], f.own.params, now)
			if f.global != nil {
				at = max(at, firstAdmit(gs, f.global.params, now))
			}
			now = max(now, at-uint64(r.IntN(2)))
		default:
			now += r.Uint64N(2 * uint64(f.gap) / 4) // floods: many packets per tick
		}
		// Two phases: each level decides on its own
		// state, then both are charged.
		o, g := own[s], gs
		ok := o.Admit(f.own.params, now, 1)
		if f.global != nil {
			ok = ok && g.Admit(f.global.params, now, 1)
		}
		want := uint32(xdpDrop)
		if ok {
			want = xdpPass
			own[s], gs = o, g
		}
		if got := xdpltest.Run(t, l, srcs[s].MustBuild(), time.Duration(now)); got != want {
			t.Fatalf("cache off %v: packet %d (source %d, t=%d): program %s, model %s",
				off, i, s, now, letters([]uint32{got}), letters([]uint32{want}))
		}
	}
	checkRefusedHits(t, l, off)
}

// checkRefusedHits: with the cache off no packet is refused from it; with
// it on, at least a tenth of the 4000, some of them from the flow cache.
func checkRefusedHits(t *testing.T, l *maps.Limiter, off bool) {
	hits := refusedHits(t, l)
	if off && hits != 0 {
		t.Errorf("cache off: %d packets refused from it", hits)
	}
	if !off && hits < 400 {
		t.Errorf("cache on: only %d of 4000 packets refused from it", hits)
	}
	if !off {
		flows := flowHits(t, l)
		t.Logf("%d of 4000 refused from the caches, %d of them from the flow cache", hits, flows)
		// The flow cache copies refusals of a rule's own
		// level, alone or behind the global one.
		if flows == 0 {
			t.Error("cache on: no packet refused from the flow cache")
		}
	}
}

// TestRefusedCacheReload: a reload that keeps a level keeps its state and
// its cached refusals; one that changes its limit gives it a new state id,
// and the cached refusals of the old limit must not refuse under the new
// one (at the same instant).
func TestRefusedCacheReload(t *testing.T) {
	for _, c := range []struct {
		name     string
		policy   func(limit string) string
		strict   string // refuses all but the first packet for a minute
		loose    string // admits a burst of 3 at once
		loosePat string
	}{
		{"own level", func(lim string) string { return "rules:\n  - name: r\n    limit: " + lim + "\n" },
			"{algorithm: token_bucket, rate: 1/m, burst: 1}", "{algorithm: token_bucket, rate: 1000/s, burst: 3}", "PPPD"},
		{"fixed window", func(lim string) string { return "rules:\n  - name: r\n    limit: " + lim + "\n" },
			"{algorithm: fixed_window, packets: 1, window: 1m}", "{algorithm: fixed_window, packets: 3, window: 1m}", "PPPD"},
		{"global aggregate", func(lim string) string {
			return "rules:\n  - name: r\n    limit: {algorithm: token_bucket, rate: 1000000/s, burst: 1000000}\n" +
				"    aggregate:\n      - key: global\n        limit: " + lim + "\n"
		}, "{algorithm: token_bucket, rate: 1/m, burst: 1}", "{algorithm: token_bucket, rate: 1000/s, burst: 3}", "PPPD"},
	} {
		t.Run(c.name, func(t *testing.T) {
			testutil.PinCPU(t, 0)
			l := loadWith(t, maps.Options{Clock: maps.ClockMap, TrackAfter: 1}, c.policy(c.strict))
			pkt := udp4("192.0.2.1").MustBuild()
			flood := func(n int) string { return letters(repeatRun(t, l, pkt, n)) }
			apply := func(yaml string) {
				if err := l.Apply(xdpltest.Compile(t, yaml)); err != nil {
					t.Fatal(err)
				}
			}
			if got := flood(6); got != "PDDDDD" {
				t.Fatalf("strict limit: %s", got)
			}
			hits := refusedHits(t, l)
			if hits == 0 {
				t.Fatal("a flood over a one-a-minute limit was never refused from the cache")
			}
			// The same limit, another rule put before it: the state and
			// the cached refusal stay.
			apply(strings.Replace(c.policy(c.strict), "rules:\n",
				"rules:\n  - name: other\n    match: {protocol: tcp}\n    limit: "+c.strict+"\n", 1))
			if got := flood(3); got != "DDD" {
				t.Errorf("after a reload that keeps the limit: %s", got)
			}
			if h := refusedHits(t, l); h != hits+3 {
				t.Errorf("after a reload that keeps the limit: %d refusals from the cache, want %d", h-hits, 3)
			}
			apply(c.policy(c.loose))
			if got := flood(len(c.loosePat)); got != c.loosePat {
				t.Errorf("after a reload that changes the limit: %s, want %s", got, c.loosePat)
			}
		})
	}
}

// firstAdmit is the first time from now on at which state s would admit a
// packet, as far as the state alone decides it: found by bisection within
// now's window for the window algorithms (their refusal can only lift
// within a window, or at its end), over the bucket's tolerance otherwise.
func firstAdmit(s model.State, p model.Params, now uint64) uint64 {
	admits := func(at uint64) bool { c := s; return c.Admit(p, at, 1) }
	if admits(now) {
		return now
	}
	hi := now + 1<<40
	if p.Algorithm != model.AlgTokenBucket {
		hi = (now+p.P3)/p.P1*p.P1 + p.P1 - p.P3 // the window's end
		if !admits(hi - 1) {
			return hi
		}
	}
	lo := now // refused at lo, admitted at hi (or hi is the window's end)
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if admits(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}
