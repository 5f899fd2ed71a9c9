// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/binary"
	"fmt"
	"strings"
	"time"

	"github.com/xdplimit/xdplimit/internal/harness/bpfprof"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

// The profile: the stage benchmark's paths and the parser alone, each run
// whole (production's build) under a sampler of the thread's CPU time,
// each sample named by the program's source line or the kernel function it
// landed in. Where the stage table subtracts medians of different programs,
// this reads one program; its shares are scaled to the path's ns a packet
// timed without the sampler (which costs CPU of its own).

// profilePeriod: one sample per 20 µs of CPU time, ~150 runs of a path.
const profilePeriod = 20 * time.Microsecond

// profileTop is how many places each path's table lists.
const profileTop = 14

// The new-source paths of the profile: every packet from a source never
// seen before (the program rotating it over 2^24 addresses, a full 1M
// table), through the product and through its floor program.
const (
	newSourceProfile      = "new source, counted in the admission sketch (2^24 sources rotating, 1M table)"
	newSourceFloorProfile = "floor: a new source left without an entry (the same rotation)"
)

type profilePath struct {
	name    string
	ns      float64 // per packet, unsampled (CPU-time slope)
	profile *bpfprof.Profile
	err     error
}

type profileResults struct {
	Calls, Repeat int
	Paths         []*profilePath
}

func profileBench(e *env, quick bool) (*profileResults, error) {
	res := &profileResults{Calls: 24, Repeat: 1 << 18}
	if quick {
		res.Calls = 6
	}
	type profiled struct {
		stagePath
		floor maps.Floor // a floor program instead of the product, or 0
	}
	paths := []profiled{{stagePath: stagePath{"the parser alone", "rules: []\n", xdpDrop, false}}}
	for _, sp := range stagePaths {
		paths = append(paths, profiled{stagePath: sp})
	}
	// A new source's target is the one furthest from its floor: the
	// product's path beside the floor program's.
	paths = append(paths, profiled{stagePath: stagePath{newSourceProfile, oneRule(tbPass), xdpPass, true}},
		profiled{stagePath{newSourceFloorProfile, oneRule(tbPass), xdpPass, true}, maps.FloorUntracked})
	base32 := binary.BigEndian.Uint32(microBase.AsSlice())
	err := onPinnedThread(1, func() error {
		for i, sp := range paths {
			opts := maps.Options{Clock: maps.ClockCoarse, MaxSources: 1 << 16, BenchParseOnly: i == 0}
			c := &microCase{name: sp.name, want: sp.want, warm: 1000,
				frame: pktgen.UDP4(microSrc4, microDst4, 4000, 53, 18)}
			if sp.rotate {
				opts.MaxSources, opts.BenchRotate, opts.BenchBase = 1<<20, 1<<24, microBase
				c.warm, c.rotate, c.base = 1<<20, 1<<24, base32
			}
			opts.BenchFloor = sp.floor
			pp := &profilePath{name: sp.name}
			res.Paths = append(res.Paths, pp)
			e.Logf("profile: %s", sp.name)
			pp.ns, pp.profile, pp.err = profileOne(c, opts, sp.yaml, res)
			if err := e.ctx.Err(); err != nil {
				return err
			}
		}
		return nil
	})
	return res, err
}

// profileOne loads the path's program, warms it, times it unsampled by
// the slope, then samples it.
func profileOne(c *microCase, opts maps.Options, yaml string, res *profileResults) (float64, *bpfprof.Profile, error) {
	l, err := loadLimiter(opts, yaml, nil)
	if err != nil {
		return 0, nil, err
	}
	defer l.Close()
	c.prog = l.Program()
	c.advance(0)
	if _, _, err := c.prog.Benchmark(c.frame, c.warm, nil); err != nil {
		return 0, nil, err
	}
	c.advance(c.warm)
	var ns []float64
	for range 3 {
		n, err := c.run(res.Repeat)
		if err != nil {
			return 0, nil, err
		}
		ns = append(ns, n)
	}
	sym, err := bpfprof.NewSymbolizer(c.prog)
	if err != nil {
		return 0, nil, err
	}
	p, err := bpfprof.Sample(sym, profilePeriod, res.Calls, func() (int, error) {
		ret, _, err := c.prog.Benchmark(c.frame, res.Repeat, nil)
		c.advance(res.Repeat)
		if err == nil && ret != c.want {
			err = fmt.Errorf("verdict %d, the path is built to measure %d", ret, c.want)
		}
		return res.Repeat, err
	})
	return sample(ns).median(), p, err
}

func (r *report) writeProfile(b *strings.Builder) {
	pr := r.Profile
	if pr == nil {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("## Profile: where each path's nanoseconds go, by source line\n\n")
	p("Each path of the stage table, and the parser alone, run whole (production's build) in BPF_PROG_TEST_RUN\n")
	p("on one pinned CPU, %d calls of %d runs, the thread sampled every %v of its CPU time\n", pr.Calls, pr.Repeat, profilePeriod)
	p("(`internal/harness/bpfprof`: the task clock, no hardware counters in this guest). A sample is named by the\n")
	p("program's source line it landed on (BTF line info, the JIT's address of each line) or by the kernel\n")
	p("function (the test run's loop, a helper, a map's lookup). A timer sample lands where the thread was\n")
	p("when the timer fired: a slow load is charged to the instructions after it as often as to itself, so\n")
	p("read a line with its neighbours. ns = the share of samples times the path's ns a packet, timed without\n")
	p("the sampler (CPU-time slope). The test run's own loop (`bpf_test_run` and what it calls) is in every\n")
	p("path, the parser alone included.\n\n")
	for _, pp := range pr.Paths {
		if pp.err != nil {
			p("**%s**: %s\n\n", pp.name, errString(pp.err))
			continue
		}
		prof := pp.profile
		p("**%s**: %.1f ns a packet, %d samples (%d lost), %.0f%% in the program's own code.\n\n",
			pp.name, pp.ns, prof.Samples, prof.Lost, 100*prof.InProgram())
		p("| Share | ns | Where | Source |\n|---:|---:|---|---|\n")
		entries := prof.Entries()
		var rest bpfprof.Entry
		for i, en := range entries {
			if i >= profileTop {
				rest.Samples += en.Samples
				rest.Share += en.Share
				continue
			}
			src := en.Text
			if len(src) > 90 {
				src = src[:87] + "..."
			}
			p("| %.1f%% | %.1f | %s | %s |\n", 100*en.Share, en.Share*pp.ns, en.Name, mdCode(src))
		}
		if rest.Samples > 0 {
			p("| %.1f%% | %.1f | %d other places | |\n", 100*rest.Share, rest.Share*pp.ns, len(entries)-profileTop)
		}
		p("\n")
	}
}

// mdCode quotes a source line for a table cell.
func mdCode(s string) string {
	if s == "" {
		return ""
	}
	return "`" + strings.ReplaceAll(strings.ReplaceAll(s, "`", "'"), "|", "\\|") + "`"
}
