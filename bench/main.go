// SPDX-License-Identifier: Apache-2.0

// Command bench measures xdplimit against the parser alone (the floor under
// every verdict), the physical limit (a bare XDP_DROP), nftables and
// iptables-legacy hashlimit on this machine, the drop log and top under a
// flood, and fleet limits' accuracy and sync cost against a Redis of its
// own, and writes BENCHMARKS.md and a chart of the veth comparison. `make
// bench` runs it; run it as root.
//
//	go run ./bench [-quick] [-only micro,macro,syncookie,droplog,accuracy,control,fleet,fleetscale,profile,traffic] [-out FILE] [-chart FILE]
//
// Every result is a ratio of configurations measured side by side in one
// run, interleaved, each a median over repetitions: the absolute numbers
// move with the machine and with whatever else runs on it, the ratios much
// less. Nothing here asserts a time; targets are reported as met or not.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

var sections = []string{"micro", "macro", "syncookie", "droplog", "accuracy", "control", "fleet", "fleetscale", "profile", "traffic"}

func main() {
	quick := flag.Bool("quick", false, "fewer repetitions and packets, for iterating (a minute or two); the report says so")
	only := flag.String("only", strings.Join(sections, ","), "sections to run, comma-separated: "+strings.Join(sections, ", ")+
		" (the report then holds only those)")
	out := flag.String("out", "", "report to write (default BENCHMARKS.md for a full run, bench/out/partial.md"+
		" for a quick or partial one)")
	chart := flag.String("chart", "", "chart of the veth comparison (gnuplot); its data goes next to it as .dat "+
		"(default bench/veth.png for a full run, bench/out/veth.png for a quick or partial one)")
	script := flag.String("gnuplot", "bench/chart.gp", "gnuplot script that draws the chart")
	timeout := flag.Duration("timeout", 25*time.Minute, "hard limit for the whole run")
	against := flag.String("against", "", "another build's program (an ELF object: make bench-against REV=...): "+
		"measure this build beside it, case for case, and nothing else (report: bench/out/against.md)")
	flag.Parse()

	run := map[string]bool{}
	for _, s := range strings.Split(*only, ",") {
		s = strings.TrimSpace(s)
		if !slices.Contains(sections, s) {
			fmt.Fprintf(os.Stderr, "bench: unknown section %q (have %s)\n", s, strings.Join(sections, ", "))
			os.Exit(2)
		}
		run[s] = true
	}
	if *against != "" {
		run = map[string]bool{"against": true}
		if *out == "" {
			*out = filepath.Join("bench", "out", "against.md")
		}
	}
	if *out == "" {
		*out = defaultOut(*quick, len(run) < len(sections), "BENCHMARKS.md", "partial.md")
	}
	if *chart == "" {
		*chart = defaultOut(*quick, len(run) < len(sections), "bench/veth.png", "veth.png")
	}
	for _, f := range []string{*out, *chart} {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			os.Exit(1)
		}
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "bench: run as root: it loads XDP programs and creates network namespaces")
		os.Exit(1)
	}

	// SIGINT/SIGTERM end the run through its context; netns.CloseOnSignal
	// (installed with the first namespace) deletes the namespaces too, even if
	// we were stuck.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, unix.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	if err := benchMain(ctx, run, *quick, *out, *chart, *script, *against); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

// defaultOut is where a run writes a file it was given no name for: the
// committed one for a full run, and for a quick or partial one a file of
// that name in bench/out (ignored by git), so that it never replaces the
// full run's by accident.
func defaultOut(quick, partial bool, full, name string) string {
	if quick || partial {
		return filepath.Join("bench", "out", name)
	}
	return full
}

func benchMain(ctx context.Context, run map[string]bool, quick bool, out, chart, script, against string) error {
	e := newEnv(ctx, os.Stderr)
	defer e.close()
	sweepPins(e.log)

	rep := &report{Quick: quick, Start: time.Now(), Machine: describeMachine()}
	step := func(name string, fn func() error) {
		if !run[name] || ctx.Err() != nil {
			return
		}
		t := time.Now()
		e.Logf("=== %s", name)
		if err := try(fn); err != nil {
			e.Logf("%s: %v", name, err)
			rep.Errors = append(rep.Errors, fmt.Sprintf("%s: %s", name, errString(err)))
		}
		rep.Durations = append(rep.Durations, fmt.Sprintf("%s %v", name, time.Since(t).Round(time.Second)))
	}
	step("micro", func() (err error) { rep.Micro, err = microBench(e, quick); return err })
	step("macro", func() (err error) { rep.Macro, err = macroBench(e, quick); return err })
	step("syncookie", func() (err error) { rep.SynCookie, err = synCookieBench(e, quick); return err })
	step("droplog", func() (err error) { rep.DropLog, err = dropLogBench(e, quick); return err })
	step("accuracy", func() (err error) { rep.Accuracy, err = accuracyBench(e, quick); return err })
	step("control", func() (err error) { rep.Control, err = controlBench(e, quick); return err })
	step("fleet", func() (err error) { rep.Fleet, err = fleetBench(e, quick); return err })
	step("fleetscale", func() (err error) { rep.FleetScale, err = fleetScaleBench(e, quick); return err })
	step("profile", func() (err error) { rep.Profile, err = profileBench(e, quick); return err })
	step("traffic", func() (err error) { rep.Traffic, err = trafficBench(e, quick); return err })
	step("against", func() (err error) { rep.Against, err = againstBench(e, quick, against); return err })
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("interrupted (%v): %s left as it was", context.Cause(ctx), out)
	}
	rep.Elapsed = time.Since(rep.Start)
	if rep.Against != nil {
		return rep.writeAgainstOnly(out)
	}
	return rep.write(e, out, chart, script)
}
