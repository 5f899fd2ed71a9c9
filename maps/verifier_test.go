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
	insns    int    // processed instructions
	stack    string // stack depth of each function, the program's first
	chain    stackChain
	chainErr error
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
				t.Logf("%s: processed %d insns, stack depth %s, deepest chain %v", name, n, stats[name].stack, stats[name].chain)
				if n > verifierBudget {
					t.Errorf("%s: the verifier processed %d instructions, over the budget of %d (the kernel's limit is 1M)",
						name, n, verifierBudget)
				}
				if err := stats[name].chainErr; err != nil {
					t.Errorf("%s: %v", name, err)
				} else if c := stats[name].chain; c.bytes > maxCombinedStack {
					t.Errorf("%s: stack depth %s: the chain of calls %v takes over the %d bytes a kernel "+
						"without private stacks (6.1) allows", name, stats[name].stack, c, maxCombinedStack)
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
			st.chain, st.chainErr = deepestStackChain(p, st.stack)
		}
		byProg[name] = st
	}
	return byProg, nil
}
