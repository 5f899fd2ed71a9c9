package main

import (
	"bufio"
	"fmt"
	"os"
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
	SynCookie *synResults
	Accuracy  *accuracyResults
	Control   *controlResults
	Fleet     *fleetResults
	Errors    []string
	Durations []string
}

type target struct {
	what, measured, status string
}

// judge sets a target judged case by case: measured lists the cases,
// failed the ones that missed (none: met).
func (t *target) judge(parts, failed []string, note string) {
	if len(parts) == 0 {
		t.measured, t.status = "-", "not measured"
		return
	}
	f := ""
	if len(failed) > 0 {
		f = " (" + strings.Join(failed, ", ") + ")"
	}
	t.measured, t.status = strings.Join(parts, ", ")+note, met(len(failed) == 0, f)
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
		// The one-word algorithms, one table lookup each. sliding_log
		// is left out: it looks up its log as well, by design (its own
		// rows in the micro table say what that costs).
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
		ts = append(ts, m.dropPathTargets()...)
	}
	if m := r.Macro; m != nil {
		algs := []string{"xdplimit-tb", "xdplimit-fw", "xdplimit-sw"}
		ratioTarget := func(what, base, scenario string, min float64, floor bool) {
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
			suffix := ""
			if x := m.ratio(macroParser, base, scenario, true); floor && x > 0 {
				suffix = fmt.Sprintf(" (the parser alone %.2f×)", x)
			}
			t.judge(parts, fails, suffix)
			ts = append(ts, t)
		}
		ratioTarget("veth single-source flood ≥ 0.8× bare XDP_DROP", "xdp-drop", "single", 0.8, false)
		ratioTarget("veth single-source flood ≥ 0.85× bare XDP_DROP", "xdp-drop", "single", 0.85, true)
		ratioTarget("veth 16M-source flood, per-source + global levels ≥ 0.85× bare XDP_DROP", "xdp-drop", "16M", 0.85, true)
		ratioTarget("veth single-source flood ≥ 3× the nftables set", "nft-set", "single", 3, false)
		ratioTarget("veth single-source flood ≥ 2× iptables hashlimit", "hashlimit", "single", 2, false)
		ratioTarget("veth 16M-source flood ≥ 3× nftables", "nft-set", "16M", 3, false)
		ratioTarget("veth 16M-source flood ≥ 3× iptables hashlimit", "hashlimit", "16M", 3, false)
	}
	ts = append(ts, r.fleetTargets()...)
	if a := r.Accuracy; a != nil {
		ts = append(ts, accuracyTargets(a.Queues)...)
	}
	return ts
}

func shortAlg(name string) string {
	if base, ok := strings.CutSuffix(name, ", refused cache off"); ok {
		return shortAlg(base) + " (cache off)"
	}
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

	p("## Targets\n\nThe targets of issues 3, 14 and 16, each with the number measured in this run. The veth targets are judged\n")
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
	r.writeSynCookie(&b)
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
	p("`Program.Benchmark` on one thread pinned to CPU %d, the same 60-byte UDP frame; %d rounds per case, the\n", m.CPU, m.Rounds)
	p("cases interleaved round by round. A round is two calls, of %d and %d runs, and ns/packet is the slope\n", m.Repeat/4, m.Repeat)
	p("of the thread's CPU time between them: the kernel's own figure is whole nanoseconds (±20%% on a 5 ns\n")
	p("program), the CPU time is exact to the nanosecond over a call, stops while the thread is rescheduled,\n")
	p("and the slope cancels each call's fixed cost (`bench/timing.go`). Real clock: coarse (`CLOCK_MONOTONIC_COARSE`, the production default) unless\n")
	p("the case says ktime. Drop cases limit to one packet a minute (after a warm-up every packet is over the\n")
	p("limit), pass cases to 10⁸ per second (the most a policy may say). Many-source cases set the program's\n")
	p("benchmark rotation (`xdpl_bench_rotate`), which rewrites the IPv4 source before parsing: each run is the\n")
	p("next address of a full-period walk; the harness advances the frame between calls so that no call\n")
	p("repeats an address. The parser alone is the program loaded with `xdpl_bench_parse_only`, which drops\n")
	p("every packet right after the parser has read and checked its headers as the stack would: the floor under\n")
	p("every verdict, since no packet may escape that check. The SYN cookie cases run a 74-byte SYN\n")
	p("and set `xdpl_bench_frame`, which copies the SYN back into the buffer before each run: the kernel re-runs\n")
	p("one buffer and keeps what the program wrote, and an answered SYN leaves a SYN-ACK there. All three pay\n")
	p("that copy, so they compare like with like.\n\n")
	p("Inserts is the share of measured packets that created a source-table entry (the `new_source` counter);\n")
	p("cached, the share refused from the per-CPU flow cache or refused-until cache (`flow_cached` + `refused_cached`).\n\n")
	p("| Case | ns/packet (median) | min – max | × bare XDP_DROP | Inserts | Cached |\n|---|---:|---:|---:|---:|---:|\n")
	base := m.baseline()
	group := ""
	for _, c := range m.Cases {
		if c.group == stagesGroup {
			continue // their own table (writeStages)
		}
		if c.group != group {
			group = c.group
			p("| **%s** | | | | | |\n", group)
		}
		name := c.name
		if c.note != "" {
			name += " — " + c.note
		}
		if c.err != nil || len(c.ns) == 0 {
			p("| %s | failed: %s | | | | |\n", name, strings.ReplaceAll(errString(c.err), "\n", " "))
			continue
		}
		ratio := "-"
		if base > 0 {
			ratio = fmt.Sprintf("%.2f×", c.ns.median()/base)
		}
		ins, hits := "", ""
		if c.inserts >= 0 && c.lim != nil {
			ins, hits = pct(c.inserts), pct(c.hits)
		}
		p("| %s | %.1f | %.1f – %.1f | %s | %s | %s |\n", name, c.ns.median(), c.ns.min(), c.ns.max(), ratio, ins, hits)
	}
	p("\n")
	m.writeStages(b)
	m.writeTwoCPU(b)
	return nil
}
