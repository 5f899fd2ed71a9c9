// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/xdplimit/xdplimit/fleet"
)

// fleetTargets are the fleet limits' targets with this run's numbers.
func (r *report) fleetTargets() []target {
	var ts []target
	if f := r.Fleet; f != nil {
		sync := 100 * time.Millisecond
		for _, c := range []struct {
			what            string
			senders         int
			global          bool
			tolerance, want float64
		}{
			{"fleet, 3 hosts flooded evenly at 10× the limit, sync 100 ms: admitted/configured 1 ± 0.05", 3, false, 0.05, 1},
			{"fleet, the same source on one host only: that host admits the whole fleet limit (1 ± 0.05)", 1, false, 0.05, 1},
			{"fleet `global` level, 3 hosts flooded evenly: admitted/configured 1 ± 0.05", 3, true, 0.05, 1},
			{"fleet `global` level, one host only: admits the whole fleet limit (1 ± 0.05)", 1, true, 0.05, 1},
		} {
			t := target{what: c.what}
			a := f.find(3, c.senders, sync, c.global)
			if a == nil || a.err != "" {
				t.measured, t.status = "-", "not measured"
			} else {
				x := a.ratio(f.Duration)
				t.measured = fmt.Sprintf("%.3f (%d admitted of %.0f configured over %v)", x, a.admitted, a.configured(f.Duration), f.Duration)
				t.status = met(x >= c.want-c.tolerance && x <= c.want+c.tolerance, "")
			}
			ts = append(ts, t)
		}
	}
	if m := r.Micro; m != nil {
		ts = append(ts, m.fleetCostTarget())
	}
	return ts
}

// fleetCostTarget judges a fleet level's cost on the pairs where the
// level's state is read; the pairs the refused-until cache answers at both
// scopes are listed after them, not judged.
func (m *microResults) fleetCostTarget() target {
	t := target{what: "a fleet level's datapath cost within 10% of the same level at host scope, fixed windows included, " +
		"judged where the level's state is read (pass, and drop with the refused-until cache off)"}
	var judged []figure
	var cacheOnly []string
	for _, p := range m.FleetPairs {
		x := p.ratio.median()
		if p.cacheOnly {
			cacheOnly = append(cacheOnly, fmt.Sprintf("%s %.3f×", shortAlg(p.host.name), x))
			continue
		}
		name := shortAlg(p.host.name)
		if p.fleet.name == mFleetTBShare {
			name += " (within its share)"
		}
		judged = append(judged, figure{name: name, x: x, shown: fmt.Sprintf("%s %.3f×", name, x)})
	}
	note := " (median of adjacent calls"
	if len(cacheOnly) > 0 {
		note += "; not judged, the refused-until cache answering at both scopes: " + strings.Join(cacheOnly, ", ")
	}
	t.judgeFigures(judged, atMost(fleetCostMax), note+")")
	return t
}

// fleetCostMax is the most a fleet level may cost, × the same level at host scope.
const fleetCostMax = 1.10

func (r *report) writeFleet(b *strings.Builder) {
	f := r.Fleet
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	if f == nil && r.Micro == nil {
		return
	}
	p("## Fleet limits\n\n")
	r.writeFleetCost(b)
	if f == nil {
		return
	}
	p("### Accuracy: admitted / configured\n\n")
	p("Simulated fleets (`internal/harness/fleetsim`, the simulation the fleet tests use): each host is the real XDP\n")
	p("program with an injected clock, run with `BPF_PROG_TEST_RUN`, and its real sync engine; all talk to one\n")
	p("real redis-server. One clock drives them in 1 ms steps, and every host syncs at once every sync\n")
	p("interval. One source floods at %d× the fleet limit (token_bucket, %d/s, burst %d) for %v of simulated\n", fleetFlood, fleetRate, fleetBurst, f.Duration)
	p("time, its packets spread evenly over the hosts it reaches. Configured is burst + rate × t = %.0f.\n", fleetBurst+fleetRate*f.Duration.Seconds())
	p("The bound is the design's (`policy check` prints it): over any time t the fleet admits at most\n")
	p("burst + rate × t + N × rate × sync, each host running at most one sync of the rate ahead of what it\n")
	p("has heard from the others; it is given as the ratio it allows. Without the fleet scope, N hosts\n")
	p("flooded evenly would admit about N×.\n\n")
	p("| Hosts | Sync | Source | Admitted (per host) | Admitted / configured | Bound | Within bound |\n|---:|---:|---|---:|---:|---:|---|\n")
	for _, a := range f.Accuracy {
		if a.err != "" {
			p("| %d | %v | %s | failed: %s | | | |\n", a.hosts, a.sync, a.label(), a.err)
			continue
		}
		x, bound := a.ratio(f.Duration), a.bound(f.Duration)
		within := "yes"
		if x > bound {
			within = "**NOT MET**"
		}
		p("| %d | %v | %s | %d (%s) | **%.3f** | ≤ %.3f | %s |\n", a.hosts, a.sync, a.label(), a.admitted, joinInts(a.perHost), x, bound, within)
	}
	p("\n")
	r.writeFleetSync(b)
}

// writeFleetCost is the datapath's side: the micro cases of a level at
// fleet scope against the same level at host scope.
func (r *report) writeFleetCost(b *strings.Builder) {
	m := r.Micro
	if m == nil || len(m.FleetPairs) == 0 {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("### Datapath cost of a fleet level\n\n")
	p("A known source over and under its limit, the level at fleet scope against the same level at host\n")
	p("scope, on the micro table's pinned CPU with its repetitions per call. The interleaved rounds of that\n")
	p("table put a second between two calls of a case, and this shared machine's noise over a second (±20%%\n")
	p("seen) is larger than the 10%% asked; so each pair is also measured call after call, %d times, which\n", len(m.FleetPairs[0].ratio))
	p("goes first alternating, and the ratio is the median of the per-pair ratios. A fleet level's admission\n")
	p("also adds to the key's pending count for the next sync; the first admission of a key in a sync epoch\n")
	p("reports it to the control plane (once per key per sync; not in these numbers: no engine runs). A key\n")
	p("within its local share charges its share's bucket on the same word instead, after a lookup of the\n")
	p("level's share (the row marked so).\n")
	p("Over its limit a key is refused from the per-CPU refused-until cache after its first refusal, at\n")
	p("either scope (the Cached column of the micro table): those drop rows measure the cache and are not\n")
	p("judged; the rows with the cache off measure the level's own drop path, where the fleet's reserve is\n")
	p("read, and with the pass rows they are the ones the target is judged on.\n\n")
	p("| Level | Host scope ns/packet (table) | Fleet scope ns/packet (table) | Fleet / host, adjacent calls (min – max) | Within 10%% |\n|---|---:|---:|---:|---|\n")
	for _, pr := range m.FleetPairs {
		x := pr.ratio.median()
		status := met(x <= fleetCostMax, "")
		if pr.cacheOnly {
			status = "not judged (the cache)"
		}
		name := pr.host.name
		if pr.fleet.name == mFleetTBShare {
			name += "; fleet key within its local share"
		}
		p("| %s | %.1f | %.1f | %.3f× (%.2f – %.2f) | %s |\n", name, pr.host.ns.median(), pr.fleet.ns.median(),
			x, pr.ratio.min(), pr.ratio.max(), status)
	}
	p("\n")
}

func (r *report) writeFleetSync(b *strings.Builder) {
	f := r.Fleet
	if len(f.Sync) == 0 {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("### Cost of one sync by active keys\n\n")
	p("One host (the real program on the real clock, its engine, a redis-server in a namespace on the same\n")
	p("machine) with a per-source fleet token bucket; before each sync, k sources (the program's benchmark\n")
	p("rotation) each admit one packet, so k keys have consumption to exchange. One sync is: read the keys the\n")
	p("datapath reported, take their pending counts (the apply program, in batches of 4096), one pipelined\n")
	p("round trip of EVALSHA per key to Redis, and the fold. CPU is this process's user + system time over\n")
	p("the sync (the apply program runs in its system time); Redis CPU is the server's (10 ms resolution);\n")
	p("bytes are counted on the engine's connections; commands are Redis's `total_commands_processed`, which counts\n")
	p("the TIME, GET and SET each EVALSHA runs besides the EVALSHA itself.\n")
	p("Medians of %d syncs. The cost is measured with the policy's sync at %v, the longest allowed: the\n", f.SyncRuns, syncCostInterval)
	p("engine gives an exchange ten intervals (1 to 5 s) plus 50 µs per key, so a big sync stretches\n")
	p("rather than fails. The last rows run at the default 100 ms interval.\n")
	p("Fits 100 ms says whether the sync took less than the default interval: one Redis core exchanges\n")
	p("about 70k keys a second, so past that a 100 ms sync takes longer than its interval (size the\n")
	p("interval to the active keys, or spread them over a cluster's shards).\n\n")
	p("Above the bound: the engine exchanges at most `MaxKeys` (default %d) keys per sync, the heaviest\n", fleet.DefaultMaxKeys)
	p("first, and counts the rest as unsynced (`xdplimit_fleet_keys_unsynced_total`); they keep their pending\n")
	p("count and go in a later sync. The datapath's report ring holds %d reports; a running engine drains\n", f.Ring)
	p("it four times per interval, while this benchmark admits every key before one sync, so here reports\n")
	p("past the ring are lost (`fleet_key_lost`) and those keys report at their next admission in a later\n")
	p("epoch.\n\n")
	p("| Active keys | Sync | Reported | Exchanged | Unsynced (over MaxKeys) | Lost (ring full) | Wall | CPU | Redis CPU | Sent | Received | Redis commands | CPU per exchanged key | Bytes per exchanged key | Fits 100 ms |\n")
	p("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, c := range f.Sync {
		if c.err != "" || len(c.wall) == 0 {
			p("| %d | %v | failed: %s | | | | | | | | | | | | |\n", c.keys, c.interval, c.err)
			continue
		}
		x := c.exchanged.median()
		perCPU, perB := "-", "-"
		if x > 0 {
			perCPU = fmt.Sprintf("%.1f µs", 1e6*c.cpu.median()/x)
			perB = fmt.Sprintf("%.0f", (c.tx.median()+c.rx.median())/x)
		}
		fits := "yes"
		if c.wall.median() > 0.1 {
			fits = "**no**"
		}
		p("| %d | %v | %.0f | %.0f | %.0f | %.0f | %s | %s | %s | %s | %s | %.0f | %s | %s | %s |\n", c.keys, c.interval,
			c.reported.median(), x, c.unsynced.median(), c.lost.median(), fmtDur(c.wall.median()),
			fmtDur(c.cpu.median()), fmtDur(c.redisCPU.median()), fmtBytes(c.tx.median()), fmtBytes(c.rx.median()),
			c.ops.median(), perCPU, perB, fits)
	}
	p("\n")
}

func fmtBytes(x float64) string {
	switch {
	case x >= 1<<20:
		return fmt.Sprintf("%.1f MiB", x/(1<<20))
	case x >= 1<<10:
		return fmt.Sprintf("%.1f KiB", x/(1<<10))
	}
	return fmt.Sprintf("%.0f B", x)
}
