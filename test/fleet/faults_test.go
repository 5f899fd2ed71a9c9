package fleet

// Faults of the fleet sync end to end: real attach
// processes on the lab's hosts, real floods, a real redis-server that the
// tests kill, restart, slow down and cut off. None of these faults may stop
// enforcement, and none may grow the processes without bound. The fleet
// limit is accuracy_test.go's: a token bucket of 1000/s, burst 1000, per
// source, flooded at ten times that; each phase floods from a source of its
// own, so it starts from a full bucket (burst + rate x t). Once a fault is
// over, the fleet limit must hold as accuracy_test.go has it: ±5% over a
// flood of the same length.

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testkit/fleetlab"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
)

const faultSync = 100 * time.Millisecond

// src is the flooding source of phase n.
func src(n int) netip.Addr { return netip.AddrFrom4([4]byte{198, 51, 100, byte(10 + n)}) }

// localWant is what one host admits of a fresh source alone: the whole
// limit, burst + rate x t.
func localWant(res spreadResult) float64 { return tbBurst + tbRate*res.Elapsed.Seconds() }

// maxAttempts bounds the exchanges a sync loop that never reaches Redis
// tries in d: the first at once, then after a backoff doubling from two
// sync intervals up to 5 s (fleet/link.go), plus one for timing.
func maxAttempts(d time.Duration) int {
	n, at := 1, time.Duration(0)
	for backoff := 2 * faultSync; ; backoff = min(2*backoff, 5*time.Second) {
		if at += backoff; at > d {
			return n + 1
		}
		n++
	}
}

// 1. No Redis at attach: attach succeeds, enforces each host's whole limit
// (fallback local), logs one warning, retries with backoff and no more
// often; once Redis is started, it says so and the fleet limit holds.
func TestFleetFaultRedisAbsentAtAttach(t *testing.T) {
	testutil.RequireRedis(t)
	l := fleetlab.NewLab(t, 3)
	hosts := allHosts(l)
	begin := time.Now()
	// Nothing listens at the Redis address yet: connection refused.
	f := startFleet(t, l, tbPolicy(fleetYAML(faultSync.String(), false, redisURL(l)), "fleet", ""), fleetOptions{})
	quiet := make([]int, len(hosts))
	for _, i := range hosts {
		f.waitLines(t, i, 1, downLine, 5*time.Second)
		quiet[i] = f.lines(i, "")
	}

	got, res := floodAdmitted(t, l, spread{Hosts: hosts, Rate: floodRate, Dur: 3 * time.Second, Src: src(1)})
	for i, a := range got {
		nearLeast(t, fmt.Sprintf("host %d alone (fallback local: the whole limit)", i), a, localWant(res),
			leastLocal(t, res, i), tolerance)
	}

	down := time.Since(begin)
	for _, i := range hosts {
		// Nothing at all is written while Redis stays down: no line per
		// retry (go-redis's own logger wrote one per failed dial).
		if n := f.lines(i, downLine); n != 1 || f.lines(i, "") != quiet[i] {
			t.Errorf("host %d: %d warnings and %d more lines in %v of Redis down, want 1 and none (one per change of state):\n%s",
				i, n, f.lines(i, "")-quiet[i], down, f.proc(i).output())
		}
		s := fleetSample(t, l.Host(i))
		t.Logf("host %d after %v down: %v syncs, %v errors %v, up %v", i, down.Round(time.Millisecond), s.syncs, s.errTotal(), s.errs, s.up)
		if s.up != 0 || s.errs["connect"] < 3 || s.errTotal() > float64(maxAttempts(down)) {
			t.Errorf("host %d: redis_up %v, %v failed exchanges in %v: want 0, and from 3 (retries) to %d (backoff)",
				i, s.up, s.errTotal(), down, maxAttempts(down))
		}
		// The loop itself goes on (ticks are dropped while a sync runs
		// long or the machine is busy): the fallback is applied.
		if s.syncs < 0.25*down.Seconds()/faultSync.Seconds() {
			t.Errorf("host %d: %v syncs in %v", i, s.syncs, down)
		}
		statusHas(t, l, i, "DOWN since", "enforcing with fallback local")
	}

	l.StartRedis(t, "")
	for _, i := range hosts {
		// The next retry is due within the 5 s cap of the backoff.
		f.waitLines(t, i, 1, upLine, 7*time.Second)
		statusHas(t, l, i, "up since")
	}
	checkFleetAdmits(t, l, spread{Hosts: hosts, Rate: floodRate, Dur: floodDur, Src: src(2)})
	for _, i := range hosts {
		if d, u := f.lines(i, downLine), f.lines(i, upLine); d != 1 || u != 1 {
			t.Errorf("host %d: %d down and %d up lines for one outage, want 1 and 1:\n%s", i, d, u, f.proc(i).output())
		}
	}
}

// 2 and 6. Redis killed under a flood, then restarted empty: every host
// keeps its limit throughout (each the whole limit while Redis is down),
// the fleet limit holds again once Redis is back, the metrics and status
// follow the outage, and the processes do not grow.
func TestFleetFaultRedisKilledMidFlood(t *testing.T) {
	testutil.RequireRedis(t)
	l := fleetlab.NewLab(t, 3)
	hosts := allHosts(l)
	srv := l.StartRedis(t, "")
	f := startFleet(t, l, tbPolicy(fleetYAML(faultSync.String(), false, redisURL(l)), "fleet", ""), fleetOptions{WaitUp: true})

	// A first flood so that the baseline includes a process that has
	// synced under load (pools, buffers at their working size).
	floodSpread(t, l, spread{Hosts: hosts, Rate: floodRate, Dur: time.Second, Src: src(0)})
	use0 := make([]procUsage, len(hosts))
	m0 := make([]sample, len(hosts))
	for _, i := range hosts {
		use0[i], m0[i] = usage(t, f.proc(i)), fleetSample(t, l.Host(i))
		statusHas(t, l, i, "up since")
	}

	// The flood outlasts the outage and the agents' reconnection, however
	// long they take on this machine: Redis restarts 5-7 s in on an idle
	// one, later on a loaded one (the scrapes and status reads between
	// take longer), and an agent retries with a backoff of up to 5 s; a
	// flood of a fixed 14 s ended before some host was back, which then
	// had no keys to exchange. It runs until every host has exchanged
	// keys again (40 s at the most).
	c0 := readCounts(t, l)
	floodCtx, stopFlood := context.WithCancel(t.Context())
	defer stopFlood()
	wait := spreadUntil(floodCtx, l, spread{Hosts: hosts, Rate: floodRate, Dur: 40 * time.Second, Src: src(1)})
	time.Sleep(2 * time.Second)
	m1 := samples(t, l)
	c1, t1 := readCounts(t, l), time.Now()
	srv.Kill(t)
	for _, i := range hosts {
		f.waitLines(t, i, 1, downLine, 2*time.Second)
	}
	time.Sleep(300 * time.Millisecond) // the status file is rewritten every second
	m2 := samples(t, l)
	c2, t2 := readCounts(t, l), time.Now()
	for _, i := range hosts {
		statusHas(t, l, i, "DOWN since", "connect", "enforcing with fallback local")
	}
	quiet := make([]int, len(hosts))
	for _, i := range hosts {
		quiet[i] = f.lines(i, "")
	}
	time.Sleep(2500 * time.Millisecond)
	for _, i := range hosts {
		if n := f.lines(i, "") - quiet[i]; n != 0 {
			t.Errorf("host %d: %d lines logged during 2.5 s of the same outage, want none:\n%s", i, n, f.proc(i).output())
		}
	}
	m3 := samples(t, l)
	c3, t3 := readCounts(t, l), time.Now()
	srv.Restart(t)
	for _, i := range hosts {
		f.waitLines(t, i, 1, upLine+" again", 7*time.Second)
	}
	waitExchanged(t, l, m3, 5*time.Second)
	stopFlood()
	res := wait(t)
	c4 := settledCounts(t, l)
	checkJudged(t, c0, c4, res)
	m4 := samples(t, l)

	// Each host alone enforced the whole limit while Redis was down: no
	// more than rate x t (its bucket was empty), give or take one sync's
	// worth; and no less than most of it (it did not stop admitting).
	out := admitted(c2, c3)
	span := admitted(c1, c3)
	for _, i := range hosts {
		w := tbRate * t3.Sub(t2).Seconds()
		lag := tbRate * faultSync.Seconds()
		t.Logf("host %d: admitted %.0f in the %v of the outage (rate x t = %.0f), %.0f from before the kill (%v)",
			i, out[i], t3.Sub(t2).Round(time.Millisecond), w, span[i], t3.Sub(t1).Round(time.Millisecond))
		if out[i] > w*(1+tolerance)+lag || out[i] < 0.6*w {
			t.Errorf("host %d: admitted %.0f while Redis was down, want about %.0f", i, out[i], w)
		}
		if lim := tbRate*t3.Sub(t1).Seconds()*(1+tolerance) + 2*lag; span[i] > lim {
			t.Errorf("host %d: admitted %.0f from the kill to the restart, more than its whole limit (%.0f)", i, span[i], lim)
		}
	}

	// Metrics across the outage: exchanges and remote units stop while
	// Redis is down, connection errors count, syncs go on.
	for _, i := range hosts {
		a, b, c, d := m1[i], m2[i], m3[i], m4[i]
		t.Logf("host %d: up %v/%v/%v, keys %v/%v/%v/%v, remote %v/%v/%v/%v, connect errors %v/%v/%v, syncs %v/%v",
			i, a.up, c.up, d.up, a.keys, b.keys, c.keys, d.keys, a.remote, b.remote, c.remote, d.remote,
			a.errs["connect"], c.errs["connect"], d.errs["connect"], a.durCount, d.durCount)
		switch {
		case a.up != 1 || c.up != 0 || d.up != 1:
			t.Errorf("host %d: xdplimit_fleet_redis_up %v before, %v during, %v after the outage", i, a.up, c.up, d.up)
		case a.keys <= m0[i].keys || a.remote <= m0[i].remote:
			t.Errorf("host %d: keys exchanged %v -> %v, remote units %v -> %v under the flood before the outage",
				i, m0[i].keys, a.keys, m0[i].remote, a.remote)
		case c.keys != b.keys || c.remote != b.remote:
			t.Errorf("host %d: keys exchanged %v -> %v, remote units %v -> %v while Redis was down", i, b.keys, c.keys, b.remote, c.remote)
		case c.errs["connect"] <= a.errs["connect"]:
			t.Errorf("host %d: connect errors %v -> %v across the kill", i, a.errs["connect"], c.errs["connect"])
		case d.keys <= c.keys:
			t.Errorf("host %d: keys exchanged %v -> %v once Redis was back", i, c.keys, d.keys)
		case c.durCount <= a.durCount || d.durCount <= c.durCount || c.syncs <= b.syncs:
			t.Errorf("host %d: sync durations observed %v/%v/%v, syncs %v/%v", i, a.durCount, c.durCount, d.durCount, b.syncs, c.syncs)
		}
		statusHas(t, l, i, "up since")
	}

	// Restarted empty, Redis holds nothing: the fleet limit must hold again.
	checkFleetAdmits(t, l, spread{Hosts: hosts, Rate: floodRate, Dur: floodDur, Src: src(2)})
	m5 := samples(t, l)
	for _, i := range hosts {
		// The source of the outage is over its limit on every host: the
		// empty Redis's count of it stays below each host's own debt, so
		// there is nothing to fold until a fresh source floods.
		if m5[i].remote <= m4[i].remote {
			t.Errorf("host %d: remote units %v -> %v over a flood once Redis was back", i, m4[i].remote, m5[i].remote)
		}
		if m5[i].errTotal() != m4[i].errTotal() {
			t.Errorf("host %d: sync errors %v -> %v after Redis was back", i, m4[i].errs, m5[i].errs)
		}
		if d := f.lines(i, downLine); d != 1 {
			t.Errorf("host %d: %d down lines for one outage:\n%s", i, d, f.proc(i).output())
		}
		// One outage must cost nothing that stays: generous bounds, but
		// finite (a goroutine or a connection per failed sync would pass
		// them within minutes, not within one test).
		u := usage(t, f.proc(i))
		t.Logf("host %d: VmRSS %d -> %d kB, threads %d -> %d, goroutines %v -> %v",
			i, use0[i].rssKB, u.rssKB, use0[i].threads, u.threads, m0[i].goroutines, m5[i].goroutines)
		if u.rssKB > use0[i].rssKB+32<<10 || u.threads > use0[i].threads+8 || m5[i].goroutines > m0[i].goroutines+10 {
			t.Errorf("host %d grew across the outage: VmRSS %d -> %d kB, threads %d -> %d, goroutines %v -> %v",
				i, use0[i].rssKB, u.rssKB, use0[i].threads, u.threads, m0[i].goroutines, m5[i].goroutines)
		}
	}
}

// waitExchanged waits until every host has exchanged keys since the
// samples before: the flood goes on, so a host whose link is back reports
// keys at its next sync (the one that logs it back, or the next).
func waitExchanged(t *testing.T, l *fleetlab.Lab, before []sample, timeout time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(timeout); ; time.Sleep(50 * time.Millisecond) {
		now, all := samples(t, l), true
		for i := range now {
			all = all && now[i].keys > before[i].keys
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			for i := range now {
				if now[i].keys <= before[i].keys {
					t.Errorf("host %d: keys exchanged %v -> %v in %v of the flood since Redis was back",
						i, before[i].keys, now[i].keys, timeout)
				}
			}
			return
		}
	}
}

func samples(t *testing.T, l *fleetlab.Lab) []sample {
	t.Helper()
	s := make([]sample, l.Hosts())
	for i := range s {
		s[i] = fleetSample(t, l.Host(i))
	}
	return s
}

// 3. Redis slow for every host (a round trip of 3 sync intervals) and cut
// off from host 2: the syncs stretch, the packet path judges every frame,
// host 2 falls back to its whole limit and hosts 0 and 1 keep the fleet
// limit between them; after Heal the fleet limit holds for all three.
func TestFleetFaultSlowAndPartitioned(t *testing.T) {
	testutil.RequireRedis(t)
	l := fleetlab.NewLab(t, 3)
	hosts := allHosts(l)
	srv := l.StartRedis(t, "")
	proxy := testutil.StartDelayProxy(t, l.RedisNS, net.JoinHostPort(fleetlab.RedisIP.String(), "6380"), srv.Addr(), 0)
	f := startFleet(t, l, tbPolicy(fleetYAML(faultSync.String(), false, "redis://"+proxy.Addr()+"/0"), "fleet", ""),
		fleetOptions{WaitUp: true})

	// 100 ms each way: a round trip of 200 ms, two sync intervals, well
	// within a sync's deadline (10 intervals, 1 s here, fleet/engine.go
	// syncDeadline). A sync is one round trip, the bans' read included
	// (fleet/exchange.go), and its local work overlaps it: over the link
	// it takes at least the round trip, and at most what a sync takes
	// without the delay, measured here first, plus the round trip. Half a
	// round trip more is allowed for the variation between samples; a
	// second round trip (the bans' read sent after the exchange, as it
	// was: 1.1-1.2 s on a loaded machine, and timeouts) exceeds it. The
	// samples with the delay are taken once the syncs in flight when it
	// began are over: one that started before it ends quickly and would
	// pull the mean under the round trip.
	const oneWay = 100 * time.Millisecond
	z := samples(t, l)
	time.Sleep(time.Second)
	a := samples(t, l)
	proxy.SetDelay(oneWay)
	time.Sleep(4 * oneWay)
	a = samples(t, l)
	time.Sleep(1500 * time.Millisecond)
	b := samples(t, l)
	var stretched time.Duration
	for _, i := range hosts {
		d, d0 := meanSync(a[i], b[i]), meanSync(z[i], a[i])
		t.Logf("host %d: mean sync %v over a %v round trip, %v without the delay", i, d.Round(time.Millisecond),
			2*oneWay, d0.Round(time.Millisecond))
		if d < 2*oneWay || d > d0+3*oneWay {
			t.Errorf("host %d: syncs took %v on average through a %v round trip, %v without: want one round trip more",
				i, d.Round(time.Millisecond), 2*oneWay, d0.Round(time.Millisecond))
		}
		stretched = max(stretched, d)
	}

	l.Partition(t, 2)
	f.waitLines(t, 2, 1, downLine, 3*time.Second)
	statusHas(t, l, 2, "DOWN since", "enforcing with fallback local")
	got, res := floodAdmitted(t, l, spread{Hosts: hosts, Rate: floodRate, Dur: 5 * time.Second, Src: src(1)})
	want := localWant(res)
	nearLeast(t, "host 2, cut off (fallback local: the whole limit)", got[2], want, leastLocal(t, res, 2), tolerance)
	// Hosts 0 and 1 share the limit, each up to one (stretched) sync
	// ahead of the other: the bound policy check states, burst + rate x t
	// + N x rate x sync, with the measured sync.
	pair := got[0] + got[1]
	bound := want + 2*tbRate*stretched.Seconds()
	least := leastLocal(t, res, 0, 1)
	t.Logf("hosts 0 and 1 admitted %.0f (%.0f + %.0f); burst + rate x t = %.0f, bound with %v syncs %.0f",
		pair, got[0], got[1], want, stretched.Round(time.Millisecond), bound)
	if pair < (1-tolerance)*least || pair > bound*(1+tolerance) {
		t.Errorf("hosts 0 and 1 admitted %.0f, want %.0f to %.0f", pair, (1-tolerance)*least, bound*(1+tolerance))
	}
	// The errors by kind: timeouts for the host cut off (its packets
	// vanish), none for the hosts on the slow link.
	after := samples(t, l)
	for _, i := range hosts {
		s := after[i]
		t.Logf("host %d: redis_up %v, errors %v", i, s.up, s.errs)
		switch {
		case i == 2 && (s.up != 0 || s.errs["timeout"] < 1):
			t.Errorf("host 2, cut off: redis_up %v, errors %v; want 0 and timeouts", s.up, s.errs)
		case i != 2 && (s.up != 1 || s.errTotal() != 0 || f.lines(i, downLine) != 0):
			t.Errorf("host %d on a slow link that answers in time: redis_up %v, errors %v, fell back %d times:\n%s",
				i, s.up, s.errs, f.lines(i, downLine), f.proc(i).output())
		}
	}

	l.Heal(t, 2)
	proxy.SetDelay(0)
	f.waitLines(t, 2, 1, upLine+" again", 7*time.Second)
	checkFleetAdmits(t, l, spread{Hosts: hosts, Rate: floodRate, Dur: floodDur, Src: src(2)})
}

// shareTolerance bounds fallback share: each host charges what it admitted
// times N-1 only at its next sync, so a host runs up to one interval ahead
// of its share, and pays it back at the next. Measured: within 2%.
const shareTolerance = 0.05

// 4. fallback: share with Redis down: each host admits the limit divided
// by the live hosts Redis reported before the outage.
func TestFleetFaultFallbackShare(t *testing.T) {
	testutil.RequireRedis(t)
	l := fleetlab.NewLab(t, 3)
	hosts := allHosts(l)
	srv := l.StartRedis(t, "")
	fy := fleetYAML(faultSync.String(), false, redisURL(l)) + "  fallback: share\n"
	f := startFleet(t, l, tbPolicy(fy, "fleet", ""), fleetOptions{WaitUp: true})
	for _, i := range hosts {
		deadline := time.Now().Add(5 * time.Second)
		for fleetSample(t, l.Host(i)).hosts != float64(len(hosts)) {
			if time.Now().After(deadline) {
				t.Fatalf("host %d: Redis never reported %d live hosts", i, len(hosts))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	srv.Kill(t)
	for _, i := range hosts {
		f.waitLines(t, i, 1, downLine+" share", 3*time.Second)
	}
	got, res := floodAdmitted(t, l, spread{Hosts: hosts, Rate: floodRate, Dur: 5 * time.Second, Src: src(1)})
	want := localWant(res)
	total, least := 0.0, 0.0
	n := float64(len(hosts))
	for _, i := range hosts {
		li := leastLocal(t, res, i) / n
		nearLeast(t, fmt.Sprintf("host %d (fallback share: limit / 3)", i), got[i], want/n, li, shareTolerance)
		total, least = total+got[i], least+li
	}
	nearLeast(t, "the fleet (fallback share)", total, want, least, shareTolerance)
}
