package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/internal/command"
)

type machine struct {
	CPU, Kernel, Go string
	Revision        string // the commit measured, and whether the datapath differed from it
	Cores           int
	MemGiB          float64
}

func describeMachine() machine {
	m := machine{CPU: "unknown", Cores: runtime.NumCPU(), Go: runtime.Version()}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		s := bufio.NewScanner(f)
		for s.Scan() {
			if k, v, ok := strings.Cut(s.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	m.Revision = revision()
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		m.MemGiB = float64(si.Totalram) * float64(si.Unit) / (1 << 30)
	}
	return m
}

// revision names the commit the run measured, and says so when bpf/ or
// gen/ (the datapath the harness loads) had changes not in it: numbers from
// a datapath nobody can check out are worth knowing as such.
func revision() string {
	head, err := command.Run(10*time.Second, "git", "rev-parse", "--short", "HEAD")
	if err != nil {
		return "unknown (not a git checkout)"
	}
	rev := strings.TrimSpace(string(head))
	dirty, err := command.Run(10*time.Second, "git", "status", "--porcelain", "--", "bpf", "gen", "maps")
	if err == nil && len(strings.TrimSpace(string(dirty))) > 0 {
		rev += " with uncommitted changes to the datapath (bpf/, gen/ or maps/)"
	}
	return rev
}

type report struct {
	Quick     bool
	Start     time.Time
	Elapsed   time.Duration
	Machine   machine
	Micro     *microResults
	Macro     *macroResults
	Accuracy  *accuracyResults
	Control   *controlResults
	Fleet     *fleetResults
	Errors    []string
	Durations []string
}

type target struct {
	what, measured, status string
}

func met(ok bool, failures string) string {
	if ok {
		return "met"
	}
	return "**NOT MET**" + failures
}

func (r *report) targets() []target {
	var ts []target
	if m := r.Micro; m != nil {
		base := m.baseline()
		worst, worstName := 0.0, ""
		var parts []string
		for _, n := range []string{mTBDrop, mTBPass, mFWDrop, mFWPass, mSWDrop, mSWPass} {
			c := m.find(n)
			if c == nil || c.err != nil || base == 0 {
				continue
			}
			x := c.ns.median() / base
			parts = append(parts, fmt.Sprintf("%s %.1f×", shortAlg(n), x))
			if x > worst {
				worst, worstName = x, n
			}
		}
		t := target{what: "BPF_PROG_TEST_RUN, known source ≤ 4× bare XDP_DROP"}
		if worstName == "" {
			t.measured, t.status = "-", "not measured"
		} else {
			t.measured = fmt.Sprintf("worst %.2f× (%s; %.1f ns vs %.1f ns); %s", worst, worstName, worst*base, base, strings.Join(parts, ", "))
			t.status = met(worst <= 4, "")
		}
		ts = append(ts, t)

		known := m.find(mTBPass)
		for _, n := range []string{mNew1M, mNew64k, mNewTracked1M} {
			c := m.find(n)
			t := target{what: "new source into a full table ≤ 2× the known-source cost (" + strings.TrimPrefix(n, "new source into a ") + ")"}
			if c == nil || c.err != nil || known == nil || known.err != nil {
				t.measured, t.status = "-", "not measured"
			} else {
				x := c.ns.median() / known.ns.median()
				t.measured = fmt.Sprintf("%.2f× (%.0f ns vs %.0f ns for a known source, token bucket, pass; %s of the packets inserted)",
					x, c.ns.median(), known.ns.median(), pct(c.inserts))
				t.status = met(x <= 2, "")
			}
			ts = append(ts, t)
		}
	}
	if m := r.Macro; m != nil {
		algs := []string{"xdplimit-tb", "xdplimit-fw", "xdplimit-sw"}
		ratioTarget := func(what, base, scenario string, min float64) {
			t := target{what: what}
			var parts, fails []string
			for _, a := range algs {
				x := m.ratio(a, base, scenario, true)
				if x == 0 {
					continue
				}
				parts = append(parts, fmt.Sprintf("%s %.2f× (wall clock %.2f×)", shortConfig(a), x, m.ratio(a, base, scenario, false)))
				if x < min {
					fails = append(fails, shortConfig(a))
				}
			}
			if len(parts) == 0 {
				t.measured, t.status = "-", "not measured"
			} else {
				t.measured = strings.Join(parts, ", ")
				f := ""
				if len(fails) > 0 {
					f = " (" + strings.Join(fails, ", ") + ")"
				}
				t.status = met(len(fails) == 0, f)
			}
			ts = append(ts, t)
		}
		ratioTarget("veth single-source flood ≥ 0.8× bare XDP_DROP", "xdp-drop", "single", 0.8)
		ratioTarget("veth single-source flood ≥ 3× the nftables set", "nft-set", "single", 3)
		ratioTarget("veth single-source flood ≥ 2× iptables hashlimit", "hashlimit", "single", 2)
		ratioTarget("veth 16M-source flood ≥ 3× nftables", "nft-set", "16M", 3)
		ratioTarget("veth 16M-source flood ≥ 3× iptables hashlimit", "hashlimit", "16M", 3)
	}
	ts = append(ts, r.fleetTargets()...)
	if a := r.Accuracy; a != nil && len(a.Queues) > 0 {
		for _, n := range []int{1, 2} {
			t := target{what: fmt.Sprintf("admitted/configured 1 ± 0.05 on %d queue(s)", n)}
			var parts, fails []string
			for _, q := range a.Queues {
				if q.cpus != n {
					continue
				}
				if q.err != "" {
					parts = append(parts, q.alg+" failed")
					fails = append(fails, q.alg)
					continue
				}
				parts = append(parts, fmt.Sprintf("%s %.3f", q.alg, q.ratio()))
				if q.ratio() < 0.95 || q.ratio() > 1.05 {
					fails = append(fails, q.alg)
				}
			}
			if len(parts) == 0 {
				t.measured, t.status = "-", "not measured"
			} else {
				f := ""
				if len(fails) > 0 {
					f = " (" + strings.Join(fails, ", ") + ")"
				}
				t.measured, t.status = strings.Join(parts, ", "), met(len(fails) == 0, f)
			}
			ts = append(ts, t)
		}
	}
	return ts
}

func shortAlg(name string) string {
	switch {
	case strings.HasPrefix(name, "token bucket, over"):
		return "TB drop"
	case strings.HasPrefix(name, "token bucket, under"):
		return "TB pass"
	case strings.HasPrefix(name, "fixed window, over"):
		return "FW drop"
	case strings.HasPrefix(name, "fixed window, under"):
		return "FW pass"
	case strings.HasPrefix(name, "sliding window, over"):
		return "SW drop"
	case strings.HasPrefix(name, "sliding window, under"):
		return "SW pass"
	}
	return name
}

func shortConfig(id string) string {
	return map[string]string{"xdplimit-tb": "token bucket", "xdplimit-fw": "fixed window", "xdplimit-sw": "sliding window"}[id]
}

func fmtDur(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
	}
}

func (r *report) write(e *env, out, chart, script string) error {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	mode := "full run"
	if r.Quick {
		mode = "**quick run (-quick): fewer repetitions and packets, for iterating; not for quoting**"
	}
	p("# Benchmarks\n\n")
	p("Generated by `make bench` (`go run ./bench`, source in [bench/](bench/)); do not edit by hand.\n")
	p("Every number is a median over repetitions of configurations measured side by side in one run,\n")
	p("interleaved, and the claims are ratios between them: absolute rates move with the machine and with\n")
	p("whatever else runs on it, ratios much less. Performance is never asserted in tests.\n\n")
	p("| | |\n|---|---|\n")
	p("| Date | %s |\n", r.Start.UTC().Format("2006-01-02 15:04 MST"))
	p("| CPU | %s, %d cores |\n", r.Machine.CPU, r.Machine.Cores)
	p("| Memory | %.0f GiB |\n", r.Machine.MemGiB)
	p("| Kernel | %s |\n", r.Machine.Kernel)
	p("| Go | %s |\n", r.Machine.Go)
	p("| Commit | %s |\n", r.Machine.Revision)
	p("| Mode | %s; took %v (%s) |\n\n", mode, r.Elapsed.Round(time.Second), strings.Join(r.Durations, ", "))

	p("## Targets\n\nThe targets of issues 3 and 16, each with the number measured in this run. The veth targets are judged\n")
	p("on rates per CPU-second, which the other work on this shared VM does not skew (see the veth section);\n")
	p("the wall-clock ratio follows in parentheses.\n\n")
	p("| Target | Measured | Status |\n|---|---|---|\n")
	for _, t := range r.targets() {
		p("| %s | %s | %s |\n", t.what, t.measured, t.status)
	}
	p("\n")

	if err := r.writeMicro(&b); err != nil {
		return err
	}
	if err := r.writeMacro(e, &b, out, chart, script); err != nil {
		return err
	}
	r.writeAccuracy(&b)
	r.writeControl(&b)
	r.writeFleet(&b)
	if len(r.Errors) > 0 {
		p("## Errors\n\nThese parts of the run failed; their tables are missing or partial.\n\n")
		for _, s := range r.Errors {
			p("- %s\n", strings.ReplaceAll(s, "\n", " "))
		}
		p("\n")
	}
	return os.WriteFile(out, []byte(b.String()), 0o644)
}

func (r *report) writeMicro(b *strings.Builder) error {
	m := r.Micro
	if m == nil {
		return nil
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("## Per packet: BPF_PROG_TEST_RUN\n\n")
	p("`Program.Benchmark` on one thread pinned to CPU %d, %d runs of the same 60-byte UDP frame per call,\n", m.CPU, m.Repeat)
	p("%d calls per case, the cases interleaved call by call; the kernel times the runs (its timer stops while\n", m.Rounds)
	p("the thread is rescheduled). Real clock: coarse (`CLOCK_MONOTONIC_COARSE`, the production default) unless\n")
	p("the case says ktime. Drop cases limit to one packet a minute (after a warm-up every packet is over the\n")
	p("limit), pass cases to 10⁸ per second (the most a policy may say). Many-source cases set the program's\n")
	p("benchmark rotation (`xdpl_bench_rotate`), which rewrites the IPv4 source before parsing: each run is the\n")
	p("next address of a full-period walk; the harness advances the frame between calls so that no call\n")
	p("repeats an address.\n\n")
	p("Inserts is the share of measured packets that created a source-table entry (the `new_source` counter).\n\n")
	p("| Case | ns/packet (median) | min – max | × bare XDP_DROP | Inserts |\n|---|---:|---:|---:|---:|\n")
	base := m.baseline()
	group := ""
	for _, c := range m.Cases {
		if c.group != group {
			group = c.group
			p("| **%s** | | | | |\n", group)
		}
		name := c.name
		if c.note != "" {
			name += " — " + c.note
		}
		if c.err != nil || len(c.ns) == 0 {
			p("| %s | failed: %s | | | |\n", name, strings.ReplaceAll(errString(c.err), "\n", " "))
			continue
		}
		ratio := "-"
		if base > 0 {
			ratio = fmt.Sprintf("%.2f×", c.ns.median()/base)
		}
		ins := ""
		if c.inserts >= 0 && c.lim != nil {
			ins = pct(c.inserts)
		}
		p("| %s | %.1f | %.1f – %.1f | %s | %s |\n", name, c.ns.median(), c.ns.min(), c.ns.max(), ratio, ins)
	}
	p("\n")
	return nil
}

func (r *report) writeMacro(e *env, b *strings.Builder, out, chart, script string) error {
	m := r.Macro
	if m == nil {
		return nil
	}
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
	p("  finds no socket. A live frame needs an XDP program on the receiver (TRAPS.md), so this is the\n")
	p("  cheapest way up the stack the generator can measure.\n")
	p("- **bare XDP_DROP**: the physical limit (`pktgen.SinkDrop`).\n")
	p("- **xdplimit**, per algorithm, attached natively, coarse clock; the global level is an `aggregate` with\n")
	p("  `key: global` (windows: %d and %d packets per 1 s window).\n", perSourceRate, globalRate)
	p("- **nftables**: XDP_PASS, then in prerouting at raw priority a dynamic set with\n")
	p("  `update @src4 { ip saddr limit rate over ... }` then a plain `limit rate over` rule.\n")
	p("- **iptables-legacy hashlimit** (the real `xt_hashlimit`): XDP_PASS, then in raw PREROUTING\n")
	p("  `--hashlimit-mode srcip` then a hashlimit without a mode (one global bucket).\n\n")
	p("Scenarios: one fixed source; 64k sequential sources; random sources over a /8 (16M addresses).\n\n")
	if len(m.SetupErrors) > 0 {
		p("Configurations that could not run here: %s.\n\n", strings.Join(m.SetupErrors, "; "))
	}
	p("Load average (1/5/15 min) before and after this section: %s → %s (other engineers' tests share the machine).\n\n", m.LoadBefore, m.LoadAfter)

	if chart != "" {
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

	p("Mpps is frames received per second of the send's wall time. Per CPU-s is the same frames per second\n")
	p("of CPU time spent on them (the sending threads, which also run the receiver's NAPI in their softirq,\n")
	p("plus ksoftirqd): other programs on these shared CPUs dilute the first and not the second, so the\n")
	p("targets are judged on it; on an idle machine, where both CPUs run the flood all the time, the two give\n")
	p("the same ratios. Reached UDP is the share of received frames that passed every filter; lost, the\n")
	p("share the generator sent that the receiver never saw (veth ring overflow).\n\n")
	for _, sc := range m.Scenarios {
		p("**%s**\n\n", sc.label)
		p("| Configuration | Mpps (min – max) | × XDP_DROP | Mpps per CPU-s (min – max) | × XDP_DROP | Reached UDP | Lost |\n")
		p("|---|---:|---:|---:|---:|---:|---:|\n")
		for _, c := range m.Configs {
			cell := c.cells[sc.id]
			if len(cell.mpps) == 0 {
				p("| %s | failed | | | | | |\n", c.label)
				continue
			}
			p("| %s | %.2f (%.2f – %.2f) | %.2f× | %.2f (%.2f – %.2f) | %.2f× | %s | %s |\n", c.label,
				cell.mpps.median(), cell.mpps.min(), cell.mpps.max(), m.ratio(c.id, "xdp-drop", sc.id, false),
				cell.cpuMpps.median(), cell.cpuMpps.min(), cell.cpuMpps.max(), m.ratio(c.id, "xdp-drop", sc.id, true),
				pct(cell.toStack.median()), pct(cell.lost.median()))
		}
		p("\n")
	}

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
	var failed []string
	for _, c := range m.Configs {
		for _, s := range m.Scenarios {
			if errs := c.cells[s.id].errs; len(errs) > 0 {
				failed = append(failed, fmt.Sprintf("%s / %s: %d run(s) failed: %s", c.label, s.label, len(errs), errs[0]))
			}
		}
	}
	if len(failed) > 0 {
		p("Failed runs:\n\n")
		for _, f := range failed {
			p("- %s\n", strings.ReplaceAll(f, "\n", " "))
		}
		p("\n")
	}
	return nil
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
	var confs []*macroConfig
	for _, c := range m.Configs {
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
		p("state at once) through xdplimit on a veth, coarse clock. Configured is what the limit admits of the\n")
		p("flood as it was offered, computed by the reference model single-threaded: the rule's counters are\n")
		p("sampled every 0.5 ms during the flood and each interval's packets spread evenly over it (the flood\n")
		p("starts late, stalls when a thread is preempted, and thins out when one CPU finishes first), their\n")
		p("times read as the coarse clock reads them (the last tick: a window's edge comes up to a tick late).\n")
		p("For the token bucket that is burst + rate × span; for the fixed window, the limit per window the\n")
		p("flood filled; for the sliding window, its own weighting. Busy is the share of the span the sending\n")
		p("threads ran (other work shares these CPUs; the timeline accounts for the gaps).\n\n")
		p("| Algorithm, limit | Queues | Admitted | Configured | Admitted/configured | Offered | Span | Busy |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, q := range a.Queues {
			if q.err != "" {
				p("| %s `%s` | %d | failed: %s | | | | | |\n", q.alg, q.limit, q.cpus, q.err)
				continue
			}
			p("| %s `%s` | %d | %.0f | %.0f | %.4f | %d | %v | %.2f |\n", q.alg, q.limit, q.cpus, q.admitted, q.expected, q.ratio(),
				q.offered, q.elapsed.Round(time.Millisecond), q.busy)
		}
		p("\n")
	}
	if len(a.SWTraces) > 0 {
		p("### The sliding window against an exact sliding log\n\n")
		p("The datapath's sliding window keeps two counters per key and weights the previous window's count by\n")
		p("the share of it still inside the sliding window. Poisson traces, per source, go through `model.State`\n")
		p("(the Go mirror of the BPF code; the datapath tests hold them to identical verdicts), limit %d packets\n", a.SWLimit)
		p("per %v, each source lasting %v at a random phase of the window grid. At every packet an exact sliding\n", a.SWWindow, a.SWTraceLength)
		p("log of the packets the window admitted so far ([bench/slidelog](bench/slidelog)) says what an exact\n")
		p("sliding window would decide; decided differently is the share of packets where the two disagree:\n")
		p("admitted with the window already full, or refused with room left: the comparison Cloudflare made for\n")
		p("the same approximation (0.003%% of 400M requests, on real traffic; but see below).\n")
		p("Worst window is the most packets any exact window held after an over-limit admission, against the\n")
		p("limit. The last column runs an exact sliding-window limiter independently on the same trace and\n")
		p("compares the totals admitted.\n\n")
		p("| Trace | Source rates | Sources | Packets | Decided differently | Admitted over the limit | Refused under it | Worst window | Admitted, window / exact limiter |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, t := range a.SWTraces {
			p("| %s | %s | %d | %d | **%s** | %s | %s | %d / %d | %.4f |\n", t.name, t.rates, t.sources, t.packets, pct(t.wrongShare()),
				pct(float64(t.over)/float64(t.packets)), pct(float64(t.under)/float64(t.packets)), t.maxHeld, a.SWLimit,
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
		p("`bpftool map show` prints), loaded with `--max-sources` 64k and 1M. The tables are LRU hashes,\n")
		p("preallocated: the memory is taken at load, full or not. Per-source IPv4 keys (the default key,\n")
		p("/32) are in the table marked IPv4.\n\n")
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
