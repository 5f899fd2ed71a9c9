// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/model"
)

// The accuracy and control sections of BENCHMARKS.md.

// accuracyTargets judges the flood accuracy rows. The token bucket and the
// fixed window are held to 1 ± 0.05 of their independent references. The
// sliding window is an estimate whose documented bound (docs/policy.md) is
// at most about twice the limit in any window-long interval: it is judged by
// its worst window against that, and its ratio to an exact sliding log is
// reported beside it, not judged.
func accuracyTargets(queues []queueAccuracy) []target {
	var ts []target
	for _, n := range []int{1, 2} {
		exact := target{what: fmt.Sprintf("admitted / independent reference 1 ± 0.05 on %d queue(s): token bucket (burst + rate × span), fixed window (limit per window)", n)}
		sliding := target{what: fmt.Sprintf("sliding window on %d queue(s): worst window ≤ 2 × the limit (its documented bound)", n)}
		var parts, fails, sparts, sfails []string
		for _, q := range queues {
			if q.cpus != n {
				continue
			}
			isSliding := q.limitN > 0
			switch {
			case q.err != "" && isSliding:
				sparts, sfails = append(sparts, "failed"), append(sfails, q.alg)
			case q.err != "":
				parts, fails = append(parts, q.alg+" failed"), append(fails, q.alg)
			case isSliding:
				x := float64(q.worst) / float64(q.limitN)
				sparts = append(sparts, fmt.Sprintf("worst window %d for a limit of %d (%.2f×); admitted / exact sliding log %.3f",
					q.worst, q.limitN, x, q.ratio()))
				if x > 2 {
					sfails = append(sfails, q.alg)
				}
			default:
				parts = append(parts, fmt.Sprintf("%s %.3f", q.alg, q.ratio()))
				if q.ratio() < 0.95 || q.ratio() > 1.05 {
					fails = append(fails, q.alg)
				}
			}
		}
		if len(parts)+len(sparts) == 0 {
			continue
		}
		exact.judge(parts, fails, "")
		sliding.judge(sparts, sfails, "")
		ts = append(ts, exact, sliding)
	}
	return ts
}

func (r *report) writeAccuracy(b *strings.Builder) {
	a := r.Accuracy
	if a == nil {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("## Accuracy\n\n")
	if len(a.Queues) > 0 {
		p("### One flooding source on one queue and on two\n\n")
		p("One source floods (%d frames from the generator on one CPU, then on two, so that two CPUs update its\n", a.Count)
		p("state at once) through xdplimit on a veth, coarse clock. Reference is what the limit admits of the\n")
		p("flood as it was offered, computed independently of the datapath and of its Go mirror: the rule's\n")
		p("counters are sampled every 0.5 ms during the flood and each interval's packets spread evenly over it\n")
		p("(the flood starts late, stalls when a thread is preempted, and thins out when one CPU finishes\n")
		p("first), their times read as the coarse clock reads them (the last tick: a window's edge comes up to a\n")
		p("tick late). For the token bucket it is burst + rate × the measured span; for the fixed window, the\n")
		p("limit (or what was offered, if less) in each window the flood reached; for the sliding window, an\n")
		p("exact sliding log ([model.ExactLog](model/slidelog_exact.go)) over the flood. The sliding window is\n")
		p("an estimate documented to pass at most about twice its limit in one window-long interval: worst\n")
		p("window is the most it admitted between two samples at most a window apart, judged against that\n")
		p("bound. Busy is the share of the span the sending threads ran (other work shares these CPUs; the\n")
		p("timeline accounts for the gaps).\n\n")
		p("| Algorithm, limit | Queues | Admitted | Reference | Admitted/reference | Worst window | Offered | Span | Busy |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, q := range a.Queues {
			if q.err != "" {
				p("| %s `%s` | %d | failed: %s | | | | | | |\n", q.alg, q.limit, q.cpus, q.err)
				continue
			}
			worst := "-"
			if q.limitN > 0 {
				worst = fmt.Sprintf("%d (%.2f× the limit)", q.worst, float64(q.worst)/float64(q.limitN))
			}
			p("| %s `%s` | %d | %.0f | %.0f (%s) | %.4f | %s | %d | %v | %.2f |\n", q.alg, q.limit, q.cpus, q.admitted, q.expected, q.refName,
				q.ratio(), worst, q.offered, q.elapsed.Round(time.Millisecond), q.busy)
		}
		p("\n")
	}
	if len(a.SWTraces) > 0 {
		p("### The sliding window against an exact sliding log\n\n")
		p("The datapath's sliding window keeps two counters per key and weights the previous window's count by\n")
		p("the share of it still inside the sliding window. Poisson traces, per source, go through `model.State`\n")
		p("(the Go mirror of the BPF code; the datapath tests hold them to identical verdicts), limit %d packets\n", a.SWLimit)
		p("per %v, each source lasting %v at a random phase of the window grid. At every packet an exact sliding\n", a.SWWindow, a.SWTraceLength)
		p("log of the packets the window admitted so far ([model.ExactLog](model/slidelog_exact.go)) says what an exact\n")
		p("sliding window would decide; decided differently is the share of packets where the two disagree:\n")
		p("admitted with the window already full, or refused with room left: the comparison Cloudflare made for\n")
		p("the same approximation (0.003%% of 400M requests, on real traffic; but see below).\n")
		p("Worst window is the most packets any exact window held after an admission, against the limit.\n")
		p("The last column runs an exact sliding-window limiter independently on the same trace and compares\n")
		p("the totals admitted. The sliding_log rows run the same traces through the exact log (`model.Log`,\n")
		p("the mirror of bpf/slidelog.h) at the most it holds, %d packets per %v: it must never decide\n", model.LogMax, a.SWWindow)
		p("differently, and its worst window must equal its limit.\n\n")
		p("| Limiter | Trace | Source rates | Sources | Packets | Decided differently | Admitted over the limit | Refused under it | Worst window | Admitted, limiter / exact limiter |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, t := range a.SWTraces {
			p("| %s | %s | %s | %d | %d | **%s** | %s | %s | %d / %d | %.4f |\n", t.alg, t.name, t.rates, t.sources, t.packets, pct(t.wrongShare()),
				pct(float64(t.over)/float64(t.packets)), pct(float64(t.under)/float64(t.packets)), t.maxHeld, t.limit,
				float64(t.admitModel)/float64(t.admitLog))
		}
		p("\n")
		p("Why this is far above Cloudflare's 0.003%%: they count every request, refused ones included, so a\n")
		p("source over its limit stays far above the threshold and every estimate agrees with the exact count;\n")
		p("xdplimit counts admitted packets only (a policer), which holds every over-limit source exactly at\n")
		p("its limit, where an estimate a packet off flips the decision. The share decided differently is then\n")
		p("mostly the share of packets from over-limit sources that were admitted, each off by about one\n")
		p("packet; the totals column says what that costs over a whole trace. The worst window shows the\n")
		p("approximation's known weakness: when the previous window's packets came at its end (a source that\n")
		p("starts late in a window), weighting them as if spread evenly lets up to twice the limit through in\n")
		p("one window-long interval.\n\n")
	}
}

func (r *report) writeControl(b *strings.Builder) {
	c := r.Control
	if c == nil {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("## Control plane\n\n")
	p("| Operation | Median | min – max | n | What |\n|---|---:|---:|---:|---|\n")
	for _, t := range c.Timings {
		if t.err != "" && len(t.d) == 0 {
			p("| %s | failed: %s | | | %s |\n", t.name, strings.ReplaceAll(t.err, "\n", " "), t.note)
			continue
		}
		p("| %s | %s | %s – %s | %d | %s |\n", t.name, fmtDur(t.d.median()), fmtDur(t.d.min()), fmtDur(t.d.max()), len(t.d), t.note)
	}
	if c.Tracked > 0 {
		p("\nThe scrapes ran with %d sources in the table (counted by walking it), inserted by the program itself.\n", c.Tracked)
	}
	if len(c.Memory) > 0 {
		p("\nMemory of the state tables as the kernel accounts it (`memlock` in the map's fdinfo, what\n")
		p("`bpftool map show` prints), loaded with `--max-sources` 64k and 1M, preallocated: the memory is\n")
		p("taken at load, full or not. Per-source IPv4 keys (the default key, /32) are in the table marked\n")
		p("IPv4: an array of %d-way sets (its key a set's index, its value a set of keys, stamps and states);\n", maps.Ways4)
		p("the others are LRU hashes.\n\n")
		p("| Table | Holds | Entries | Key + value bytes | memlock | Bytes per tracked source |\n|---|---|---:|---:|---:|---:|\n")
		for _, m := range c.Memory {
			holds := "other keys"
			if m.ipv4 {
				holds = "**IPv4 sources**"
				if m.name == "xdpl_sources" {
					holds = "**every key** (IPv4 sources too)"
				}
			}
			p("| `%s` | %s | %d | %d + %d | %.1f MiB | %.1f |\n", m.name, holds, m.table, m.keySize, m.valueSize, float64(m.memlock)/(1<<20), m.perEntry())
		}
	}
	p("\n")
}
