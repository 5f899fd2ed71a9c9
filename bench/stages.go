// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/maps"
)

// Where a packet's nanoseconds go: each path measured with the whole
// program, and with copies of it cut after each stage of xdpl_main (the
// benchmark knob xdpl_bench_stop, which drops the packet there). The cut
// copies run on the whole program's maps, so the caches that the whole
// program's packets teach answer theirs too: stage k's row is what the
// path costs up to stage k, and a stage that a cache hit skips adds
// nothing, as on the real path.

const stagesGroup = "Stages: each path cut after each stage of the program"

// stagePath is one path through the program, measured stage by stage.
type stagePath struct {
	name, yaml string
	want       uint32 // the whole program's verdict
	rotate     bool   // forged sources: the program walks 2^24 of them
}

var stagePaths = []stagePath{
	{"known source over its limit (token bucket)", oneRule(tbDrop), xdpDrop, false},
	{"known source under its limit (token bucket)", oneRule(tbPass), xdpPass, false},
	{"16M forged sources, per source + global, the global level refusing", perSourceAndGlobal(tbPass, tbDrop), xdpDrop, true},
}

func stageCaseName(path string, s maps.Stage) string {
	if s == 0 {
		return path + ", whole program"
	}
	return fmt.Sprintf("%s, cut after stage %d", path, s)
}

// addStageCases adds, for each stage path, the whole program and one copy
// cut after each stage, sharing its maps.
func addStageCases(add func(*microCase, func(*microCase) (*ebpf.Program, error)),
	limiter func(maps.Options, string, map[string][]byte) func(*microCase) (*ebpf.Program, error),
	closers *[]func() error, base uint32) {
	for _, sp := range stagePaths {
		opts := maps.Options{Clock: maps.ClockCoarse, MaxSources: 1 << 16}
		warm, rotate := 1000, uint32(0)
		if sp.rotate {
			opts.MaxSources, opts.BenchRotate, opts.BenchBase = 1<<20, 1<<24, microBase
			warm, rotate = 1<<20, 1<<24
		}
		whole := &microCase{group: stagesGroup, name: stageCaseName(sp.name, 0), want: sp.want, warm: warm, rotate: rotate, base: base}
		add(whole, limiter(opts, sp.yaml, nil))
		for _, s := range maps.Stages {
			cut := opts
			cut.BenchStop = s
			add(&microCase{group: stagesGroup, name: stageCaseName(sp.name, s), want: xdpDrop, warm: warm, rotate: rotate, base: base},
				func(*microCase) (*ebpf.Program, error) {
					if whole.lim == nil {
						return nil, fmt.Errorf("the whole program did not load: %v", whole.err)
					}
					cut.Pinned = whole.lim.Maps()
					l, err := maps.Load(cut)
					if err != nil {
						return nil, err
					}
					*closers = append(*closers, l.Close)
					return l.Program(), nil
				})
		}
	}
}

// writeStages writes the stage table: for each path, what it costs up to
// each stage, and what that stage adds to the one before.
func (m *microResults) writeStages(b *strings.Builder) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	if m.find(stageCaseName(stagePaths[0].name, 0)) == nil {
		return
	}
	p("### Where the time goes: the program cut after each stage\n\n")
	p("Each path is measured whole and with copies of the program that drop the packet after stage k\n")
	p("(the benchmark knob `xdpl_bench_stop`), all on the whole program's maps: the caches its packets teach\n")
	p("answer the cut copies too, so a stage that a cache hit skips adds nothing, as on the real path. A cell is\n")
	p("ns/packet up to that stage (median), and in parentheses what the stage adds to the row above; stage 1\n")
	p("is the parser, the floor. The last row is the whole program: the verdict's counters, the drop sample\n")
	p("and, for a pass, the admitted packet's return.\n\n")
	p("| Stage |")
	for _, sp := range stagePaths {
		p(" %s |", sp.name)
	}
	p("\n|---|")
	for range stagePaths {
		p("---:|")
	}
	p("\n")
	stages := append(append([]maps.Stage{}, maps.Stages...), 0)
	prev := make([]float64, len(stagePaths))
	for i, s := range stages {
		label := fmt.Sprintf("%d. %s", s, s)
		if s == 0 {
			label = "whole program (" + s.String() + ")"
		}
		p("| %s |", label)
		for j, sp := range stagePaths {
			c := m.measuredCase(stageCaseName(sp.name, s))
			if c == nil {
				p(" failed |")
				prev[j] = 0
				continue
			}
			ns := c.ns.median()
			if i == 0 || prev[j] == 0 {
				p(" %.1f |", ns)
			} else {
				p(" %.1f (%+.1f) |", ns, ns-prev[j])
			}
			prev[j] = ns
		}
		p("\n")
	}
	p("| above the parser |")
	for _, sp := range stagePaths {
		fs := m.above(stageCaseName(sp.name, maps.StopParse), stageCaseName(sp.name, 0))
		if len(fs) == 0 {
			p(" - |")
			continue
		}
		p(" %.1f |", fs[0].x)
	}
	p("\n\n")
}
