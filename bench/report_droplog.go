// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/xdplimit/xdplimit/droplog"
	"github.com/xdplimit/xdplimit/metrics"
)

// The drop log section of BENCHMARKS.md and its target.

func (r *report) writeDropLog(b *strings.Builder) {
	d := r.DropLog
	if d == nil {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("## The drop log and `top` under a flood\n\n")
	p("Two namespaces joined by a 2-queue veth; the live-frames generator, paced at %.1f Mpps from both CPUs, sends\n", d.Rate/1e6)
	p("60-byte UDP frames from 64k sequential sources for %s per run (bounded also by a count 10%% above that\n", seconds(d.Flood))
	p("and by the generator's timeout). xdplimit is attached natively on the receiving end, coarse clock, with one\n")
	p("rule that drops the flood (a global limit of 1 packet/s) and `log: {sample: 1/%d, max_per_second: %d}`:\n", dropLogOneIn, d.Cap)
	keep := "all"
	if d.Keep < 1 {
		keep = pct(d.Keep)
	}
	p("the datapath samples one in %d drops into its per-CPU ring, and the log keeps %s of them. Two readers\n", d.Datapath, keep)
	p("read the ring at once, each with its own cursor, as production runs them: the drop log (`droplog.Logger`,\n")
	p("polling every %v as the attach process does, writing to a counter of lines) and `top`'s reader\n", droplog.PollInterval)
	p("(`metrics.DropReader`: the ring read every %v, handed over at each redraw, every %v by default). %d runs, each with a fresh limiter.\n\n", metrics.DropPoll, metrics.TopInterval, d.Reps)
	p("Asked is what the configured rate asks for: the drops the datapath counted during the run (its rule\n")
	p("counters, as `top` reads them) over %.0f. A sample reached the log when the log read it from the ring: it\n", d.oneIn())
	p("became a line or was suppressed by the rate cap (or by a full output queue, `backlog`); those the ring\n")
	p("overwrote before the log came are suppressed as `ring`. A sample reached `top` when its reader returned it\n")
	p("(what `top` estimates the sources' rates from). Mpps is the frames the receiving end's XDP program took\n")
	p("in per second of the send, and per CPU-second as in the veth section (the readers' own CPU time is not in\n")
	p("it). %d CPUs. Load average (1/5/15 min) before and after: %s → %s.\n\n", d.CPUs, d.LoadBefore, d.LoadAfter)
	if len(d.mpps) == 0 {
		p("No run succeeded.\n\n")
	} else {
		n := func(x float64) string { return fmt.Sprintf("%.0f", x) }
		mpps := func(x float64) string { return fmt.Sprintf("%.2f", x) }
		row := func(what string, s sample, f func(float64) string) {
			p("| %s | %s | %s – %s |\n", what, f(s.median()), f(s.min()), f(s.max()))
		}
		p("| | Median | Min – max |\n|---|---:|---:|\n")
		row("Mpps received (wall clock)", d.mpps, mpps)
		row("Mpps received per CPU-second", d.cpuMpps, mpps)
		row("Drops the datapath counted", d.drops, n)
		row(fmt.Sprintf("Samples asked (drops / %.0f)", d.oneIn()), d.asked, n)
		row("— per second of the flood", d.askedPerSec, n)
		row("Samples the datapath wrote to the ring", d.written, n)
		row(fmt.Sprintf("**Drop log** (every %v): samples that reached it", droplog.PollInterval), d.Log.reached, n)
		row("— coverage (reached / asked)", d.Log.coverage, pct)
		row("— drop lines written", d.lines, n)
		row("— suppressed: over the rate cap", d.rateCap, n)
		row("— suppressed: overwritten in the ring", d.Log.lost, n)
		row("— suppressed: output backlog", d.backlog, n)
		row("— summary lines written", d.summaries, n)
		row(fmt.Sprintf("— most drop lines in one second (cap %d)", d.Cap), d.peak, n)
		row(fmt.Sprintf("**top** (every %v): samples that reached it", metrics.TopInterval), d.Top.reached, n)
		row("— coverage (reached / asked)", d.Top.coverage, pct)
		row("— overwritten in the ring before it read them", d.Top.lost, n)
		p("\n")
	}
	if len(d.errs) > 0 {
		p("Failed runs: %s\n\n", strings.ReplaceAll(strings.Join(d.errs, "; "), "\n", " "))
	}
}

// target judges the drop log and top against the target: each
// reader's median coverage at least dropLogMinHits, and no second of any
// run with more drop lines than the cap.
func (d *dropLogResults) target() target {
	t := target{what: fmt.Sprintf("drop log and top under a %.0f Mpps flood of 64k sources for %s: ≥ %.0f%% of the samples the "+
		"configured rate asks for reach the log or are counted in top; the per-second cap holds",
		dropLogRate/1e6, seconds(dropLogFlood), dropLogMinHits*100)}
	if len(d.mpps) == 0 {
		t.measured, t.status = "-", "not measured"
		return t
	}
	var failed []string
	for _, x := range []struct {
		name string
		r    dropLogReader
	}{{"log", d.Log}, {"top", d.Top}} {
		if x.r.coverage.median() < dropLogMinHits {
			failed = append(failed, x.name)
		}
	}
	if d.peak.max() > float64(d.Cap) {
		failed = append(failed, "cap")
	}
	rate := fmt.Sprintf("at %.2f Mpps received (%.2f – %.2f)", d.mpps.median(), d.mpps.min(), d.mpps.max())
	// The pacing's own jitter stays well within 5%; below that the
	// machine could not keep up with generator and receiver together.
	if d.mpps.median() < 0.95*d.Rate/1e6 {
		rate += fmt.Sprintf(": the machine reached that, not %.0f Mpps, and coverage is judged at that rate", d.Rate/1e6)
	}
	flood := ""
	if d.Flood != dropLogFlood {
		flood = fmt.Sprintf(", %s floods", seconds(d.Flood))
	}
	t.judge([]string{
		fmt.Sprintf("log %s (%s – %s)", pct(d.Log.coverage.median()), pct(d.Log.coverage.min()), pct(d.Log.coverage.max())),
		fmt.Sprintf("top %s (%s – %s) of %.0f samples asked (one in %.0f drops)", pct(d.Top.coverage.median()),
			pct(d.Top.coverage.min()), pct(d.Top.coverage.max()), d.asked.median(), d.oneIn()),
		fmt.Sprintf("at most %.0f lines in a second, cap %d", d.peak.max(), d.Cap),
	}, failed, "; "+rate+flood)
	return t
}

// seconds prints d as the report's prose does: "10 s".
func seconds(d time.Duration) string { return fmt.Sprintf("%g s", d.Seconds()) }
