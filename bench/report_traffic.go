// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"slices"
	"strings"
)

// The real-traffic section of BENCHMARKS.md: each kind of traffic under
// each receiver, and xdplimit's ratio to no XDP program against its target.

// trafficTargets: the least share of the throughput or rate with no XDP
// program that the clients keep through xdplimit.
var trafficTargets = map[string]float64{"iperf3-1": 0.97, "iperf3-8": 0.97, "dns": 0.95}

// targets judges each kind of traffic through xdplimit against no XDP
// program, with the bare XDP_PASS's own ratio beside it: the floor any XDP
// program meets on this link.
func (t *trafficResults) targets() []target {
	var ts []target
	for _, g := range []struct {
		what string
		ids  []string
	}{
		{"iperf3 transfers (one stream, eight)", []string{"iperf3-1", "iperf3-8"}},
		{"DNS lookups, small UDP requests and responses", []string{"dns"}},
	} {
		want := trafficTargets[g.ids[0]]
		tg := target{what: fmt.Sprintf("veth, real traffic through xdplimit with a web server's policy: %s ≥ %.2f× no XDP program", g.what, want)}
		var fs []figure
		var floors []string
		for _, id := range g.ids {
			x := t.ratio(id, "xdplimit", "none")
			if x == 0 {
				continue
			}
			fs = append(fs, figure{name: id, x: x, shown: fmt.Sprintf("%s %.3f× (%.3f× bare XDP_PASS)", id, x, t.ratio(id, "xdplimit", "pass"))})
			floors = append(floors, fmt.Sprintf("%.3f×", t.ratio(id, "pass", "none")))
		}
		note := ""
		if len(floors) > 0 {
			note = "; the floor, a bare XDP_PASS: " + strings.Join(floors, ", ") + " no XDP program"
		}
		tg.judgeFigures(fs, atLeast(want), note)
		ts = append(ts, tg)
	}
	return ts
}

func (r *report) writeTraffic(b *strings.Builder) {
	t := r.Traffic
	if t == nil {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("## What real traffic pays\n\n")
	p("Real clients in one namespace and real servers in another, joined by a 2-queue veth: iperf3 transfers\n")
	p("to port %d (%v each) and DNS lookups by dnsperf (4 clients, 100 outstanding) answered by dnsmasq.\n", trafficPort, t.Duration)
	p("The server's end runs no XDP program, a bare XDP_PASS (any XDP program moves veth's receive path onto\n")
	p("its NAPI poll), or xdplimit with a web server's policy: an allow and a deny list, SYN cookies on ports\n")
	p("80 and 443 with a per-source SYN limit (every segment to those ports then meets the cookie's ACK check),\n")
	p("and per-source limits on the web and DNS ports that the clients stay within. %d repetitions, the\n", t.Reps)
	p("receivers' order rotated each; medians, min – max.\n\n")
	p("| Traffic | no XDP program | bare XDP_PASS | xdplimit | xdplimit / no XDP | target | bare XDP_PASS / no XDP | xdplimit / XDP_PASS |\n")
	p("|---|---:|---:|---:|---:|---|---:|---:|\n")
	for _, m := range t.Measures {
		cell := func(c string) string {
			s := t.vals[[2]string{m.id, c}]
			if len(s) == 0 {
				return "failed"
			}
			return fmt.Sprintf("%.0f %s (%.0f – %.0f)", s.median(), m.unit, s.min(), s.max())
		}
		ratio := t.ratio(m.id, "xdplimit", "none")
		want := trafficTargets[m.id]
		met := "met"
		if ratio < want {
			met = "**NOT MET**"
		}
		p("| %s | %s | %s | %s | %.3f× | ≥ %.2f×: %s | %.3f× | %.3f× |\n", m.label, cell("none"), cell("pass"), cell("xdplimit"),
			ratio, want, met, t.ratio(m.id, "pass", "none"), t.ratio(m.id, "xdplimit", "pass"))
	}
	p("\n")
	p("The floor is the bare XDP_PASS column. While the receiving end runs an XDP program, veth turns TSO off\n")
	p("on the sending end (`ethtool -k`: tcp-segmentation-offload off), so the sender's stack cuts a transfer\n")
	p("into MTU-sized segments that each cross the veth and meet the program, where without one it crossed in\n")
	p("64 KiB frames: no XDP program keeps a veth transfer near its rate without one. On a NIC the program runs\n")
	p("in the driver before GRO and the sender's TSO is untouched. xdplimit's own share is its column over\n")
	p("bare XDP_PASS.\n\n")
	var failed []string
	for k, errs := range t.errs {
		failed = append(failed, fmt.Sprintf("%s under %s: %d run(s) failed: %s", k[0], k[1], len(errs), errs[0]))
	}
	slices.Sort(failed)
	writeFailed(b, failed)
}
