// SPDX-License-Identifier: Apache-2.0

package bpfprof_test

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/harness/bpfprof"
	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

// The real program, cut to its parser (the benchmarks' knob: parse, then
// drop), sampled while BPF_PROG_TEST_RUN runs it: the samples land in it
// and in the test run's loop around it, and most of those in it name lines
// of the parser's headers (parsing*.h, and csum.h for the header's
// checksum).
func TestSampleParser(t *testing.T) {
	xdpltest.RequireBPF(t)
	l := xdpltest.Load(t, maps.Options{Clock: maps.ClockCoarse, BenchParseOnly: true}, "rules: []\n")
	sym, err := bpfprof.NewSymbolizer(l.Program())
	if err != nil {
		t.Fatal(err)
	}
	frame := pktgen.UDP4(netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("198.51.100.1"), 4000, 53, 18)
	const runs = 1 << 16
	p, err := bpfprof.Sample(sym, 20*time.Microsecond, 8, func() (int, error) {
		ret, _, err := l.Program().Benchmark(frame, runs, nil)
		if err == nil && ret != 1 {
			t.Errorf("verdict %d, want XDP_DROP", ret)
		}
		return runs, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if p.Runs != 8*runs {
		t.Errorf("%d runs counted, want %d", p.Runs, 8*runs)
	}
	entries := p.Entries()
	var parser, inProg, entry uint64
	for i, e := range entries {
		if i < 12 {
			t.Logf("%5.1f%% %6.1f ns  %-24s %s", 100*e.Share, e.Ns, e.Name, e.Text)
		}
		if e.InProgram {
			inProg += e.Samples
			if strings.HasPrefix(e.Name, "parsing") || strings.HasPrefix(e.Name, "csum.h:") {
				parser += e.Samples
			}
			if strings.Contains(e.Text, "int xdpl_main(") {
				entry += e.Samples
			}
		}
	}
	t.Logf("%d samples (%d lost) in %v of CPU, %.1f ns a run; %.0f%% in the program",
		p.Samples, p.Lost, p.CPU, p.NsPerRun(), 100*p.InProgram())
	// At one sample per 20 µs, the sampled CPU time would give ~50k a
	// second of it: a tenth of that rules out a sampler that fires rarely
	// or loses most of what it takes.
	if want := uint64(p.CPU/(20*time.Microsecond)) / 10; p.Samples+p.Lost < want {
		t.Errorf("%d samples in %v of CPU time, want at least %d", p.Samples+p.Lost, p.CPU, want)
	}
	if inProg == 0 {
		t.Fatal("no sample landed in the program")
	}
	// The program's first line is its prologue, no stage's. Under
	// emulation it also takes a fifth of the samples or more: qemu's TCG
	// takes interrupts only between the blocks it translated, so the
	// sampler's hits pile up where a block begins, the program's entry
	// most of all (up to 20% of every sample in the 6.1 VM).
	if 2*parser < inProg-entry {
		t.Errorf("%d of the %d samples on the program's lines past its entry name a line of parsing*.h or csum.h: the parser should hold most",
			parser, inProg-entry)
	}
	for _, e := range entries {
		if e.Name == "?" {
			t.Errorf("%d samples at no known place", e.Samples)
		}
	}
}
