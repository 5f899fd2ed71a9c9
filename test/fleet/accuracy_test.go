// SPDX-License-Identifier: Apache-2.0

package fleet

// Accuracy of fleet limits end to end: real attach processes on
// the lab's hosts, real veth floods, a real redis-server (or a 3-shard
// Redis Cluster). One source floods the fleet at ten times the fleet limit.

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testkit/fleetlab"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
)

// The fleet limit and the flood, ten times it: 10k frames/s in all, which
// the veths take without ring drops even when split over three hosts, so
// the counts are the limiter's, not the kernel's (both are checked).
const (
	tbRate    = 1000 // per second
	tbBurst   = 1000
	floodRate = 10 * tbRate
	floodDur  = 10 * time.Second
	tolerance = 0.05
	ruleName  = "flood"
)

// tbPolicy is a token bucket of tbRate/tbBurst at scope (fleet or host) on
// the flood's traffic (UDP to port 9, which nothing else on the hosts
// sends), keyed by source unless key says otherwise.
func tbPolicy(fleet, scope, key string) string {
	p := fleet + fmt.Sprintf(`rules:
  - name: %s
    match: {protocol: udp, dst_ports: [9]}
    limit: {algorithm: token_bucket, rate: %d/s, burst: %d, scope: %s}
`, ruleName, tbRate, tbBurst, scope)
	if key != "" {
		p += "    key: " + key + "\n"
	}
	return p
}

// hostCounts is one host's counters at a moment.
type hostCounts struct{ pass, drop, xdp uint64 }

func readCounts(t *testing.T, l *fleetlab.Lab) []hostCounts {
	t.Helper()
	c := make([]hostCounts, l.Hosts())
	for i := range c {
		h := l.Host(i)
		c[i].pass, c[i].drop = ruleCounts(t, h, ruleName)
		c[i].xdp = xdpPackets(t, h)
	}
	return c
}

// settledCounts reads the counters once the frames still in the veths'
// rings have been judged: until no XDP counter moved for 100 ms.
func settledCounts(t *testing.T, l *fleetlab.Lab) []hostCounts {
	t.Helper()
	last := readCounts(t, l)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		cur := readCounts(t, l)
		same := true
		for i := range cur {
			same = same && cur[i].xdp == last[i].xdp
		}
		if same {
			return cur
		}
		last = cur
	}
	t.Fatal("XDP counters still moving 5 s after the flood")
	return nil
}

// checkFleetAdmits floods the fleet with s and checks that the hosts
// together admitted burst + rate x t within ±5%, t being the flood's
// duration: no more whatever happened, and no less than over the time the
// flood ran, its lapses longer than the bucket's memory (burst/rate = 1 s)
// taken out (a sender held back on a loaded machine offers nothing then).
func checkFleetAdmits(t *testing.T, l *fleetlab.Lab, s spread) {
	t.Helper()
	admitted, want, res := floodAdmits(t, l, s)
	lost := res.lostRefill(s.Hosts, time.Duration(tbBurst)*time.Second/tbRate)
	least := want - tbRate*lost.Seconds()
	if lost > 0 {
		t.Logf("the floods lapsed %v beyond the bucket's memory: %.0f at the least", lost, least)
	}
	if admitted > want*(1+tolerance) || admitted < least*(1-tolerance) {
		t.Errorf("the fleet admitted %.0f, want %.0f ± %.0f%%", admitted, want, tolerance*100)
	}
}

// floodAdmits floods the fleet with s and returns what the hosts admitted
// together and burst + rate x t; it checks that every flood frame reached
// XDP and was judged.
func floodAdmits(t *testing.T, l *fleetlab.Lab, s spread) (admitted, want float64, res spreadResult) {
	t.Helper()
	before := readCounts(t, l)
	res = floodSpread(t, l, s)
	after := settledCounts(t, l)
	var judged, xdp uint64
	for i := range after {
		pass, drop := after[i].pass-before[i].pass, after[i].drop-before[i].drop
		x := after[i].xdp - before[i].xdp
		t.Logf("host %d: sent %d, reached XDP %d, judged %d: admitted %d, dropped %d",
			i, res.Sent[i], x, pass+drop, pass, drop)
		// XDP also sees the host's own background frames (neighbour
		// discovery), which the rule does not match: allow a few.
		if pass+drop > x || x > pass+drop+20 {
			t.Errorf("host %d: the rule judged %d frames, XDP received %d", i, pass+drop, x)
		}
		// Ring drops before XDP would make the admitted count the kernel's:
		// this flood rate is chosen to have none (a few tenths of a
		// percent at most).
		if pass+drop > res.Sent[i] || float64(pass+drop) < 0.99*float64(res.Sent[i]) {
			t.Errorf("host %d: judged %d of the %d frames sent", i, pass+drop, res.Sent[i])
		}
		admitted += float64(pass)
		judged, xdp = judged+pass+drop, xdp+x
	}
	want = tbBurst + tbRate*res.Elapsed.Seconds()
	t.Logf("fleet: sent %d in %v, reached XDP %d, judged %d; admitted %.0f, burst + rate x t = %.0f (ratio %.4f)",
		res.Total, res.Elapsed.Round(time.Millisecond), xdp, judged, admitted, want, admitted/want)
	return admitted, want, res
}

// checkSynced checks that each host ran its fleet sync against Redis
// without an error: the status line says up; each flooded host exchanged
// keys, and, when several were flooded, folded in the others' admissions.
func checkSynced(t *testing.T, l *fleetlab.Lab, f *fleetRun, flooded []int) {
	t.Helper()
	for _, i := range f.opts.Hosts {
		h := l.Host(i)
		line := statusFleetLine(t, h)
		keys, _ := metric(t, h, "xdplimit_fleet_keys_exchanged_total")
		remote, _ := metric(t, h, "xdplimit_fleet_remote_units_applied_total")
		errs, _ := metric(t, h, "xdplimit_fleet_sync_errors_total")
		syncs, _ := metric(t, h, "xdplimit_fleet_syncs_total")
		t.Logf("host %d: %s; %v syncs, %v keys exchanged, %v remote units applied, %v sync errors",
			i, line, syncs, keys, remote, errs)
		if !strings.Contains(line, " up since ") {
			t.Errorf("host %d: status does not show the fleet sync up: %s", i, line)
		}
		if errs != 0 {
			t.Errorf("host %d: %v sync errors", i, errs)
		}
		if slices.Contains(flooded, i) && (keys == 0 || len(flooded) > 1 && remote == 0) {
			t.Errorf("host %d: flooded, but exchanged %v keys and applied %v remote units", i, keys, remote)
		}
	}
}

// allHosts lists every host of the lab.
func allHosts(l *fleetlab.Lab) []int {
	var hosts []int
	for i := range l.Hosts() {
		hosts = append(hosts, i)
	}
	return hosts
}

// tbCase is one accuracy check: a fleet token bucket keyed by key, flooded
// by one source spread over hosts.
type tbCase struct {
	name    string
	key     string // "" = per source
	hosts   func(*fleetlab.Lab) []int
	sources uint32
}

// The checks fleet limits exist to pass: one source flooding all three
// hosts evenly, and the same source on one host only, which must get the
// whole fleet limit (no static 1/N split); the same two with a global key,
// flooded from 16 addresses so that a per-source limit would let 16 times
// through.
var tbCases = []tbCase{
	{"per-source/three hosts", "", allHosts, 1},
	{"per-source/one host", "", oneHost, 1},
	{"global/three hosts", "global", allHosts, 16},
	{"global/one host", "global", oneHost, 16},
}

func oneHost(*fleetlab.Lab) []int { return []int{1} }

// runTB starts a fleet for c (a fresh one: new pins, and a new Redis
// namespace, so every case starts with a full bucket), floods it and
// checks what it admitted.
func runTB(t *testing.T, l *fleetlab.Lab, fleetSection string, c tbCase) {
	f := startFleet(t, l, tbPolicy(fleetSection, "fleet", c.key), fleetOptions{WaitUp: true})
	hosts := c.hosts(l)
	checkFleetAdmits(t, l, spread{Hosts: hosts, Rate: floodRate, Dur: floodDur, Sources: c.sources})
	checkSynced(t, l, f, hosts)
}

// One redis-server, sync 100ms.
func TestFleetTokenBucket(t *testing.T) {
	testutil.RequireRedis(t)
	l := fleetlab.NewLab(t, 3)
	l.StartRedis(t, "")
	for _, c := range tbCases {
		t.Run(c.name, func(t *testing.T) {
			runTB(t, l, fleetYAML("100ms", false, redisURL(l)), c)
		})
	}
	// The control: the same limit at host scope lets each host admit it
	// in full, about three times the limit in all (what host-scope limits
	// give a fleet).
	// It shows that the checks above measure the fleet's sharing.
	t.Run("host scope control", func(t *testing.T) {
		startFleet(t, l, tbPolicy(fleetYAML("100ms", false, redisURL(l)), "host", ""), fleetOptions{})
		admitted, want, _ := floodAdmits(t, l, spread{Hosts: allHosts(l), Rate: floodRate, Dur: floodDur})
		if r := admitted / want; r < 2.5 {
			t.Errorf("at host scope three hosts admitted %.2f x the limit, want about 3", r)
		}
	})
}

// The first check again with the fleet's keys on a 3-shard Redis Cluster.
func TestFleetTokenBucketCluster(t *testing.T) {
	testutil.RequireRedis(t)
	l := fleetlab.NewLab(t, 3)
	c := l.StartCluster(t, testutil.RedisClusterConfig{Shards: 3})
	runTB(t, l, fleetYAML("100ms", true, clusterURLs(c)...), tbCases[0])
}

// Refill is lost only while no flooded host sent: the least lapse beyond
// the bucket's memory among them.
func TestLostRefill(t *testing.T) {
	r := spreadResult{Gaps: [][]time.Duration{{1500 * time.Millisecond, 3 * time.Second}, nil, {2500 * time.Millisecond}}}
	if got := r.lostRefill([]int{0, 2}, time.Second); got != 1500*time.Millisecond {
		t.Errorf("hosts 0 and 2: %v, want 1.5s", got)
	}
	if got := r.lostRefill([]int{0, 1}, time.Second); got != 0 {
		t.Errorf("with host 1 never lapsing: %v, want 0", got)
	}
}
