// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/xdplimit/xdplimit/internal/command"
)

// The veth section of BENCHMARKS.md: the flood table and its chart.

func (r *report) writeMacro(e *env, b *strings.Builder, out, chart, script string) error {
	m := r.Macro
	if m == nil {
		return nil
	}
	writeMacroSetup(b, m)
	if chart != "" {
		r.writeMacroChart(e, b, out, chart, script)
	}
	writeMacroTables(b, m)
	writeMacroVersus(b, m)
	writeMacroFailures(b, m)
	return nil
}

// writeMacroSetup says how the floods ran and what each configuration is.
func writeMacroSetup(b *strings.Builder, m *macroResults) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("## Throughput on a veth: xdplimit against the stack, nftables and iptables\n\n")
	p("Two namespaces joined by a 2-queue veth per family of configurations (the netfilter ones each get their\n")
	p("own, since a netfilter table stays hooked into its namespace). The project's live-frames generator\n")
	p("(`pktgen`, XDP_TX under `BPF_PROG_TEST_RUN` with live frames) sends %d 60-byte UDP frames per run from\n", m.Count)
	p("both CPUs into one end; the rate is the frames that reached the receiving end's XDP program (the veth\n")
	p("driver's `rx_queue_*_xdp_packets`) over the send's wall time. %d repetitions, each running every\n", m.Reps)
	p("configuration once per scenario, the configurations' order rotated per repetition; every run starts\n")
	p("with fresh state (a new xdplimit, a new nftables table, new hashlimit tables).\n\n")
	p("The generator and the receiver share the two CPUs (the receiving veth's NAPI runs in the sender's\n")
	p("softirq), so each rate is that of generator plus receiver: the ratios to bare XDP_DROP understate the\n")
	p("differences between receivers, but the order is the order of their per-packet cost.\n\n")
	p("Configurations, all limiting UDP to %d packets/s per source (burst %d) and then %d packets/s for all\n", perSourceRate, perSourceBurst, globalRate)
	p("sources together (burst %d), with a %d-entry source table where they have one:\n\n", globalBurst, tableSize)
	p("- **stack only**: an XDP program that returns XDP_PASS and no filter; the frames go up to UDP, which\n")
	p("  finds no socket. A live frame needs an XDP program on the receiving veth (without one it vanishes\n")
	p("  while counted as sent; `pktgen.Send`), so this is the cheapest way up the stack the generator can measure.\n")
	p("- **bare XDP_DROP**: the physical limit (`pktgen.SinkDrop`).\n")
	p("- **the parser alone**: xdplimit loaded with `xdpl_bench_parse_only` (a benchmark knob), which drops\n")
	p("  each frame once it has read and checked its headers as the stack would: the floor under every verdict.\n")
	p("- **xdplimit**, per algorithm, attached natively, coarse clock; the rule's own level is per source and\n")
	p("  the global level an `aggregate` with `key: global` (windows: %d and %d packets per 1 s window), as\n", perSourceRate, globalRate)
	p("  users write it. On the 16M-source flood also **global level written first**: the rule's own level\n")
	p("  `key: global`, the per-source one its aggregate. The compiler evaluates a global level first either\n")
	p("  way; the two measure that the order written costs nothing. On the 64k-source flood also **every\n")
	p("  frame admitted**: the token bucket's rule with limits of 100M/s, which no veth flood reaches, so\n")
	p("  that each frame goes up to the stack as with the stack only, having paid every stage of an admitted\n")
	p("  known source; and its **floor**, the floor program of `bpf/floor.h` in its place: after the parser,\n")
	p("  each frame's entry found in the same shared state table (%d entries), one GCRA step by\n", tableSize)
	p("  compare-and-swap, the pass counted. The table's cache misses are any exact limiter's; the floor is\n")
	p("  how near the stack alone this machine lets a limiter come.\n")
	p("- **nftables**: XDP_PASS, then in prerouting at raw priority a dynamic set with\n")
	p("  `update @src4 { ip saddr limit rate over ... }` then a plain `limit rate over` rule.\n")
	p("- **iptables-legacy hashlimit** (the real `xt_hashlimit`): XDP_PASS, then in raw PREROUTING\n")
	p("  `--hashlimit-mode srcip` then a hashlimit without a mode (one global bucket).\n\n")
	p("Scenarios: one fixed source; 64k sequential sources; random sources over a /8 (16M addresses).\n\n")
	if len(m.SetupErrors) > 0 {
		p("Configurations that could not run here: %s.\n\n", strings.Join(m.SetupErrors, "; "))
	}
	p("Load average (1/5/15 min) before and after this section: %s → %s (other engineers' tests share the machine).\n\n", m.LoadBefore, m.LoadAfter)
}

// writeMacroChart draws the chart and links it, or says why it is missing.
func (r *report) writeMacroChart(e *env, b *strings.Builder, out, chart, script string) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	rel, err := filepath.Rel(filepath.Dir(out), chart)
	if err != nil {
		rel = chart
	}
	if err := r.drawChart(e, chart, script); err != nil {
		p("Chart not drawn: %v\n\n", err)
	} else {
		p("![Mpps by configuration and scenario](%s)\n\n", filepath.ToSlash(rel))
	}
}

// writeMacroTables is one table a scenario: every configuration measured in it.
func writeMacroTables(b *strings.Builder, m *macroResults) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("Mpps is frames received per second of the send's wall time. Per CPU-s is the same frames per second\n")
	p("of CPU time spent on them (the sending threads, which also run the receiver's NAPI in their softirq,\n")
	p("plus ksoftirqd): other programs on these shared CPUs dilute the first and not the second, so the\n")
	p("targets are judged on it; on an idle machine, where both CPUs run the flood all the time, the two give\n")
	p("the same ratios. × the parser alone is per CPU-second, the ratio the targets judge. Reached UDP is the\n")
	p("share of received frames that passed every filter; lost, the share the generator sent that the\n")
	p("receiver never saw (veth ring overflow).\n\n")
	for _, sc := range m.Scenarios {
		p("**%s**\n\n", sc.label)
		p("| Configuration | Mpps (min – max) | × XDP_DROP | Mpps per CPU-s (min – max) | × XDP_DROP | × the parser alone | Reached UDP | Lost |\n")
		p("|---|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, c := range m.Configs {
			if !c.runs(sc.id) {
				continue
			}
			cell := c.cells[sc.id]
			if len(cell.mpps) == 0 {
				p("| %s | failed | | | | | | |\n", c.label)
				continue
			}
			p("| %s | %.2f (%.2f – %.2f) | %.2f× | %.2f (%.2f – %.2f) | %.2f× | %.2f× | %s | %s |\n", c.label,
				cell.mpps.median(), cell.mpps.min(), cell.mpps.max(), m.ratio(c.id, "xdp-drop", sc.id, false),
				cell.cpuMpps.median(), cell.cpuMpps.min(), cell.cpuMpps.max(), m.ratio(c.id, "xdp-drop", sc.id, true),
				m.ratio(c.id, macroParser, sc.id, true), pct(cell.toStack.median()), pct(cell.lost.median()))
		}
		p("\n")
	}
}

// writeMacroVersus is xdplimit over each alternative, scenario by scenario.
func writeMacroVersus(b *strings.Builder, m *macroResults) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("xdplimit against the alternatives, median over median in the same run (per CPU-second in parentheses):\n\n")
	p("| xdplimit |")
	for _, sc := range m.Scenarios {
		p(" %s: × nftables | × hashlimit | × stack only |", sc.label)
	}
	p("\n|---|")
	for range m.Scenarios {
		p("---:|---:|---:|")
	}
	p("\n")
	for _, c := range m.Configs {
		if !strings.HasPrefix(c.id, "xdplimit-") {
			continue
		}
		p("| %s |", shortConfig(c.id))
		for _, sc := range m.Scenarios {
			for _, base := range []string{"nft-set", "hashlimit", "stack"} {
				if x := m.ratio(c.id, base, sc.id, false); x > 0 {
					p(" %.2f× (%.2f×) |", x, m.ratio(c.id, base, sc.id, true))
				} else {
					p(" - |")
				}
			}
		}
		p("\n")
	}
	p("\n")
}

// writeMacroFailures lists the runs that failed, each configuration and
// scenario once with its first error.
func writeMacroFailures(b *strings.Builder, m *macroResults) {
	var failed []string
	for _, c := range m.Configs {
		for _, s := range m.Scenarios {
			if errs := c.cells[s.id].errs; len(errs) > 0 {
				failed = append(failed, fmt.Sprintf("%s / %s: %d run(s) failed: %s", c.label, s.label, len(errs), errs[0]))
			}
		}
	}
	writeFailed(b, failed)
}

func pct(x float64) string {
	switch {
	case x == 0:
		return "0%"
	case x < 0.001:
		return fmt.Sprintf("%.3f%%", 100*x)
	case x < 0.1:
		return fmt.Sprintf("%.2f%%", 100*x)
	}
	return fmt.Sprintf("%.1f%%", 100*x)
}

// drawChart writes the medians and ranges next to the chart and runs gnuplot.
func (r *report) drawChart(e *env, chart, script string) error {
	m := r.Macro
	dat := strings.TrimSuffix(chart, filepath.Ext(chart)) + ".dat"
	var b strings.Builder
	b.WriteString(`"scenario"`)
	// A configuration without a single result is left out: gnuplot
	// refuses a histogram column with no valid point.
	// So is one measured in a single scenario: the chart compares the
	// configurations across all three.
	var confs []*macroConfig
	for _, c := range m.Configs {
		if c.only != "" {
			continue
		}
		for _, cell := range c.cells {
			if len(cell.mpps) > 0 {
				confs = append(confs, c)
				fmt.Fprintf(&b, " %q \"min\" \"max\" \"cpu\" \"min\" \"max\"", c.label)
				break
			}
		}
	}
	if len(confs) == 0 {
		return fmt.Errorf("no results")
	}
	b.WriteString("\n")
	for _, s := range m.Scenarios {
		fmt.Fprintf(&b, "%q", s.label)
		for _, c := range confs {
			cell := c.cells[s.id]
			if len(cell.mpps) == 0 || len(cell.cpuMpps) == 0 {
				b.WriteString(" NaN NaN NaN NaN NaN NaN")
				continue
			}
			fmt.Fprintf(&b, " %.4f %.4f %.4f %.4f %.4f %.4f", cell.mpps.median(), cell.mpps.min(), cell.mpps.max(),
				cell.cpuMpps.median(), cell.cpuMpps.min(), cell.cpuMpps.max())
		}
		b.WriteString("\n")
	}
	if err := os.WriteFile(dat, []byte(b.String()), 0o644); err != nil {
		return err
	}
	sub := fmt.Sprintf("%s, %d cores, Linux %s, %s; %d frames per run, %d repetitions",
		r.Machine.CPU, r.Machine.Cores, r.Machine.Kernel, r.Start.UTC().Format("2006-01-02"), m.Count, m.Reps)
	if r.Quick {
		sub += " (quick run)"
	}
	out, err := command.Run(time.Minute, "gnuplot", "-e",
		fmt.Sprintf("datafile='%s'; outfile='%s'; nconf=%d; subtitle='%s'", dat, chart, len(confs), sub), script)
	if err != nil {
		return fmt.Errorf("gnuplot: %v: %s", err, out)
	}
	e.Logf("chart: %s", chart)
	return nil
}
