// SPDX-License-Identifier: Apache-2.0

package maps

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/gen"
)

// verifierBudget is the most processed instructions a program may cost the
// verifier here. The kernel refuses a program past 1M; the 100k between
// them is the headroom a change must not spend unnoticed (the counts move
// by tens of thousands with unrelated changes: docs/design.md, Verifier).
const verifierBudget = 900_000

var (
	processedRe = regexp.MustCompile(`processed (\d+) insns`)
	stackRe     = regexp.MustCompile(`stack depth ([0-9+]+)`)
)

// verifierStat is what the verifier's statistics say of one program.
type verifierStat struct {
	insns int    // processed instructions
	stack string // stack depth of each function, the program's first
}

// TestVerifierBudget loads the programs as Load does, and the companions
// that run on their maps, in every configuration whose load-time
// constants change what the verifier walks (the three clocks, each with
// and without the decision record; the benchmarks' knobs), logs the
// verifier's processed-instruction count of each program, and fails when
// one goes past verifierBudget. A measurement, not a timing: the counts
// are the kernel's own and do not depend on the machine's load. The VM
// suite runs it on 6.1, whose verifier walks differently.
func TestVerifierBudget(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_BPF) to load the XDP program")
	}
	type config struct {
		name string
		opts Options
	}
	configs := []config{
		{"ktime", Options{Clock: ClockKtime}},
		{"coarse", Options{Clock: ClockCoarse}},
		{"map", Options{Clock: ClockMap}},
		{"ktime+record", Options{Clock: ClockKtime, Record: true}},
		{"coarse+record", Options{Clock: ClockCoarse, Record: true}},
		{"map+record", Options{Clock: ClockMap, Record: true}},
		{"coarse+no-refused-cache", Options{Clock: ClockCoarse, NoRefusedCache: true}},
		// The benchmarks' knobs: they must load too.
		{"coarse+bench-rotate", Options{Clock: ClockCoarse, BenchRotate: 1 << 20,
			BenchBase: netip.MustParseAddr("10.0.0.0"), NoRefusedCache: true}},
		{"coarse+bench-parse-only", Options{Clock: ClockCoarse, BenchParseOnly: true}},
		{"coarse+bench-frame", Options{Clock: ClockCoarse, BenchFrame: make([]byte, 74)}},
	}
	for _, s := range Stages {
		configs = append(configs, config{fmt.Sprintf("coarse+bench-stop-%d", s), Options{Clock: ClockCoarse, BenchStop: s}})
	}
	for _, f := range Floors {
		configs = append(configs, config{fmt.Sprintf("coarse+bench-floor-%d", f), Options{Clock: ClockCoarse, BenchFloor: f}})
	}
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			stats, err := verifierStats(c.opts)
			if err != nil {
				t.Fatal(err)
			}
			names := make([]string, 0, len(stats))
			for name := range stats {
				names = append(names, name)
			}
			sort.Strings(names)
			for _, name := range names {
				n := stats[name].insns
				t.Logf("%s: processed %d insns, stack depth %s", name, n, stats[name].stack)
				if n > verifierBudget {
					t.Errorf("%s: the verifier processed %d instructions, over the budget of %d (the kernel's limit is 1M)",
						name, n, verifierBudget)
				}
				if d, err := stackChainFloor(stats[name].stack); err != nil {
					t.Errorf("%s: %v", name, err)
				} else if d > maxCombinedStack {
					t.Errorf("%s: stack depth %s: the program's own frame and its deepest function's take %d bytes, "+
						"over the %d a kernel without private stacks (6.1) allows a chain of calls",
						name, stats[name].stack, d, maxCombinedStack)
				}
			}
		})
	}
}

// verifierStats loads every program of the limiter for opts, its
// companions' too (the fleet apply, egress and wipe programs), with the
// verifier's statistics on and returns each one's, by program name.
func verifierStats(opts Options) (map[string]verifierStat, error) {
	spec, err := loadSpec(opts)
	if err != nil {
		return nil, err
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{
		Programs: ebpf.ProgramOptions{LogLevel: ebpf.LogLevelStats},
	})
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return nil, fmt.Errorf("the verifier rejected the program: %+v", ve)
	}
	if err != nil {
		return nil, err
	}
	defer coll.Close()
	byName := map[string]*ebpf.Map{}
	for _, name := range MapNames {
		byName[name] = coll.Maps[name]
	}
	stats := ebpf.ProgramOptions{LogLevel: ebpf.LogLevelStats}
	fleetApply, err := loadFleetApply(byName, 0, stats)
	if err != nil {
		return nil, err
	}
	defer fleetApply.Close()
	egress, err := loadEgress(byName, opts.Clock, stats)
	if err != nil {
		return nil, err
	}
	defer egress.Close()
	wipe, _, err := loadWipe(byName, stats)
	if err != nil {
		return nil, err
	}
	defer wipe.Close()
	progs := maps.Clone(coll.Programs)
	progs[gen.FleetApplyProgXdplFleetApply] = fleetApply
	progs[gen.EgressProgXdplEgress] = egress
	progs[gen.WipeProgXdplWipe] = wipe
	byProg := map[string]verifierStat{}
	for name, p := range progs {
		m := processedRe.FindAllStringSubmatch(p.VerifierLog, -1)
		if m == nil {
			return nil, fmt.Errorf("%s: no processed-instruction count in the verifier's log: %s", name, p.VerifierLog)
		}
		n, err := strconv.Atoi(m[len(m)-1][1])
		if err != nil {
			return nil, err
		}
		st := verifierStat{insns: n}
		if m := stackRe.FindStringSubmatch(p.VerifierLog); m != nil {
			st.stack = m[1]
		}
		byProg[name] = st
	}
	return byProg, nil
}

// maxCombinedStack is the most stack a chain of BPF calls may take: the
// kernel checks it on every chain, frames rounded up to 32 bytes. Kernels
// that give functions private stacks (x86 since 6.13) no longer refuse a
// deeper chain, so the host accepts what 6.1 refuses.
const maxCombinedStack = 512

// stackChainFloor reads the verifier's "stack depth A+B+...", the
// program's own frame first, and returns the program's frame plus its
// deepest function's, both rounded as the kernel rounds them: the least
// that some chain of calls takes (every function is reached from the
// program's frame), so a bound on the chains the host would not check.
func stackChainFloor(depths string) (int, error) {
	if depths == "" {
		return 0, nil
	}
	round := func(n int) int { return (max(n, 1) + 31) / 32 * 32 }
	parts := strings.Split(depths, "+")
	first, err := strconv.Atoi(parts[0])
	if err != nil {
		return 0, fmt.Errorf("stack depth %q: %v", depths, err)
	}
	deepest := 0
	for _, p := range parts[1:] {
		n, err := strconv.Atoi(p)
		if err != nil {
			return 0, fmt.Errorf("stack depth %q: %v", depths, err)
		}
		if n > 0 {
			deepest = max(deepest, round(n))
		}
	}
	return round(first) + deepest, nil
}

// The chain xdpl_main plus xdpl_ban_start that 6.1 refused when the
// parser's payload fields cost xdpl_main 16 more bytes: 296 rounds to 320,
// 200 to 224.
func TestStackChainFloor(t *testing.T) {
	for _, c := range []struct {
		depths string
		want   int
	}{{"296+200+120+64", 544}, {"280+200+120+64", 512}, {"96", 96}, {"24+16", 64}, {"0+0+0", 32}, {"", 0}} {
		if got, err := stackChainFloor(c.depths); err != nil || got != c.want {
			t.Errorf("stackChainFloor(%q) = %d, %v; want %d", c.depths, got, err, c.want)
		}
	}
}
