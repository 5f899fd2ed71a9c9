// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"strings"
)

// The SYN cookie section of BENCHMARKS.md: the veth flood's table and the
// micro rows' ratios; its target, SYNs answered per CPU-second against the
// kernel's own cookies, is in the Targets table.

// target judges xdplimit's cookies against the kernel's: SYNs answered per
// CPU-second, the veth table's medians.
func (s *synResults) target() target {
	t := target{what: fmt.Sprintf("veth, SYNs answered with cookies per CPU-second ≥ %d× the kernel's own", cookieMinKernel)}
	var fs []figure
	if x := s.cpuRatio("xdplimit-cookie", "kernel"); x > 0 {
		fs = append(fs, figure{name: "xdplimit syncookie", x: x, shown: fmt.Sprintf("%.2f×", x)})
	}
	t.judgeFigures(fs, atLeast(cookieMinKernel), "")
	return t
}

func (r *report) writeSynCookie(b *strings.Builder) {
	s := r.SynCookie
	m := r.Micro
	if s == nil && m == nil {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("## SYN cookies\n\n")
	if m != nil {
		ns := func(n string) (float64, bool) {
			c := m.find(n)
			if c == nil || c.err != nil || len(c.ns) == 0 {
				return 0, false
			}
			return c.ns.median(), true
		}
		cookie, ok1 := ns(mSynCookie)
		drop, ok2 := ns(mSynDrop)
		parser, ok3 := ns(mSynParser)
		if ok1 && ok2 && ok3 {
			p("Per packet (the micro table's SYN cookie rows, BPF_PROG_TEST_RUN): a SYN answered with a cookie costs\n")
			p("%.1f ns, %.2f× the same rule dropping it (%.1f ns) and %.2f× the parser alone (%.1f ns); the answer itself\n",
				cookie, cookie/drop, drop, cookie/parser, parser)
			p("(the kernel's cookie, the options, the checksums, the frame rewritten) %.1f ns over the drop.\n\n", cookie-drop)
		}
	}
	if s == nil {
		return
	}
	p("On a veth: two namespaces joined by a 2-queue veth; the live-frames generator sends %d 74-byte SYNs\n", s.Count)
	p("(MSS, SACK, timestamps, window scale, as Linux sends them) per run from both CPUs, from random sources\n")
	p("over a /8, to a port with a listener behind it. %d repetitions, the configurations' order rotated each.\n", s.Reps)
	p("The SYN-ACKs go back out of the veth, by XDP_TX or by the kernel's route, to an XDP_DROP on the\n")
	p("sender's end. Configurations:\n\n")
	p("- **bare XDP_DROP**: the physical limit.\n")
	p("- **xdplimit**, one rule on the port's SYNs: %d/s per source (burst %d), then %d/s for all (burst %d),\n",
		perSourceRate, perSourceBurst, globalRate, globalBurst)
	p("  coarse clock, action `drop` or `syncookie` (the SYNs under the limit go up to the listener).\n")
	p("- **the kernel's own cookies**: an XDP_PASS program (a live frame needs an XDP program on the receiver)\n")
	p("  and no filter; the listener's namespace has `tcp_syncookies=2`, so the kernel answers every SYN with\n")
	p("  a cookie, routed back through the sender's end.\n\n")
	p("SYNs handled are what each configuration did with the flood: dropped (bare XDP_DROP, xdplimit drop),\n")
	p("or answered with a SYN-ACK (xdplimit syncookie: its rule's `syncookie` verdicts; the kernel: its\n")
	p("`TcpExtSyncookiesSent`). Per CPU-s divides them by the CPU time spent on the run, the sending threads\n")
	p("(which run the receiver in their softirq) and ksoftirqd, as the veth section does; lost is the share\n")
	p("the generator sent that the receiver's full ring dropped before any program saw it.\n\n")
	p("| Configuration | SYNs handled per s (min – max) | per CPU-s (min – max) | × bare XDP_DROP (per CPU-s) | Lost |\n")
	p("|---|---:|---:|---:|---:|\n")
	for _, c := range s.Configs {
		if len(c.cpuRate) == 0 {
			p("| %s | failed | | | |\n", c.label)
			continue
		}
		p("| %s | %.0f (%.0f – %.0f) | %.0f (%.0f – %.0f) | %.2f× | %s |\n", c.label,
			c.rate.median(), c.rate.min(), c.rate.max(), c.cpuRate.median(), c.cpuRate.min(), c.cpuRate.max(),
			s.cpuRatio(c.id, "xdp-drop"), pct(c.lost.median()))
	}
	p("\n")
	if x := s.cpuRatio("xdplimit-cookie", "kernel"); x > 0 {
		p("SYNs answered per CPU-second: xdplimit's cookies %.2f× the kernel's own; %.2f× xdplimit dropping them.\n\n",
			x, s.cpuRatio("xdplimit-cookie", "xdplimit-drop"))
	}
	var failed []string
	for _, c := range s.Configs {
		if len(c.errs) > 0 {
			failed = append(failed, fmt.Sprintf("%s: %d run(s) failed: %s", c.label, len(c.errs), c.errs[0]))
		}
	}
	writeFailed(b, failed)
}
