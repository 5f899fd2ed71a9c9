// SPDX-License-Identifier: Apache-2.0

package fleet

import (
	"context"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testkit/fleetlab"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
)

// outage is TestFleetFaultRedisKilledMidFlood's fleet and what it read
// before (0, 1), during (2, 3) and after (4) Redis's outage.
type outage struct {
	t     *testing.T
	l     *fleetlab.Lab
	hosts []int
	srv   *testutil.RedisServer
	f     *fleetRun

	use0               []procUsage
	m0, m1, m2, m3, m4 []sample
	c1, c2, c3         []hostCounts
	t1, t2, t3         time.Time
}

func startOutage(t *testing.T) *outage {
	l := fleetlab.NewLab(t, 3)
	hosts := allHosts(l)
	srv := l.StartRedis(t, "")
	f := startFleet(t, l, tbPolicy(fleetYAML(faultSync.String(), false, redisURL(l)), "fleet", ""), fleetOptions{WaitUp: true})
	return &outage{t: t, l: l, hosts: hosts, srv: srv, f: f}
}

// baseline floods first so that the baseline includes a process that has
// synced under load (pools, buffers at their working size).
func (o *outage) baseline() {
	t, l := o.t, o.l
	floodSpread(t, l, spread{Hosts: o.hosts, Rate: floodRate, Dur: time.Second, Src: src(0)})
	o.use0 = make([]procUsage, len(o.hosts))
	o.m0 = make([]sample, len(o.hosts))
	for _, i := range o.hosts {
		o.use0[i], o.m0[i] = usage(t, o.f.proc(i)), fleetSample(t, l.Host(i))
		statusHas(t, l, i, "up since")
	}
}

// floodThroughOutage kills Redis under a flood and restarts it. The flood
// outlasts the outage and the agents' reconnection, however long they
// take on this machine: Redis restarts 5-7 s in on an idle one, later on
// a loaded one (the scrapes and status reads between take longer), and an
// agent retries with a backoff of up to 5 s; a flood of a fixed 14 s
// ended before some host was back, which then had no keys to exchange. It
// runs until every host has exchanged keys again (40 s at the most).
func (o *outage) floodThroughOutage() {
	t, l := o.t, o.l
	c0 := readCounts(t, l)
	floodCtx, stopFlood := context.WithCancel(t.Context())
	defer stopFlood()
	wait := spreadUntil(floodCtx, l, spread{Hosts: o.hosts, Rate: floodRate, Dur: 40 * time.Second, Src: src(1)})
	time.Sleep(2 * time.Second)
	o.m1 = samples(t, l)
	o.c1, o.t1 = readCounts(t, l), time.Now()
	o.killRedis()
	o.checkQuiet()
	o.m3 = samples(t, l)
	o.c3, o.t3 = readCounts(t, l), time.Now()
	o.srv.Restart(t)
	for _, i := range o.hosts {
		o.f.waitLines(t, i, 1, upLine+" again", 7*time.Second)
	}
	waitExchanged(t, l, o.m3, 5*time.Second)
	stopFlood()
	res := wait(t)
	c4 := settledCounts(t, l)
	checkJudged(t, c0, c4, res)
	o.m4 = samples(t, l)
}

// killRedis kills Redis and waits for every host to say so, in its log
// and its status.
func (o *outage) killRedis() {
	t, l := o.t, o.l
	o.srv.Kill(t)
	for _, i := range o.hosts {
		o.f.waitLines(t, i, 1, downLine, 2*time.Second)
	}
	time.Sleep(300 * time.Millisecond) // the status file is rewritten every second
	o.m2 = samples(t, l)
	o.c2, o.t2 = readCounts(t, l), time.Now()
	for _, i := range o.hosts {
		statusHas(t, l, i, "DOWN since", "connect", "enforcing with fallback local")
	}
}

// checkQuiet: a host logs an outage once, not at each failed sync.
func (o *outage) checkQuiet() {
	quiet := make([]int, len(o.hosts))
	for _, i := range o.hosts {
		quiet[i] = o.f.lines(i, "")
	}
	time.Sleep(2500 * time.Millisecond)
	for _, i := range o.hosts {
		if n := o.f.lines(i, "") - quiet[i]; n != 0 {
			o.t.Errorf("host %d: %d lines logged during 2.5 s of the same outage, want none:\n%s", i, n, o.f.proc(i).output())
		}
	}
}

// checkAloneDuringOutage: each host alone enforced the whole limit while
// Redis was down: no more than rate x t (its bucket was empty), give or
// take one sync's worth; and no less than most of it (it did not stop
// admitting).
func (o *outage) checkAloneDuringOutage() {
	t := o.t
	t1, t2, t3 := o.t1, o.t2, o.t3
	out := admitted(o.c2, o.c3)
	span := admitted(o.c1, o.c3)
	for _, i := range o.hosts {
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
}

// checkMetricsAcrossOutage: exchanges and remote units stop while Redis is
// down, connection errors count, syncs go on.
func (o *outage) checkMetricsAcrossOutage() {
	t, l, m0 := o.t, o.l, o.m0
	for _, i := range o.hosts {
		a, b, c, d := o.m1[i], o.m2[i], o.m3[i], o.m4[i]
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
}

// checkAfterOutage, once a fresh flood ran with Redis back: the hosts
// fold again, log no more errors nor outages, and have not grown.
func (o *outage) checkAfterOutage() {
	t, f, use0, m0, m4 := o.t, o.f, o.use0, o.m0, o.m4
	m5 := samples(t, o.l)
	for _, i := range o.hosts {
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
