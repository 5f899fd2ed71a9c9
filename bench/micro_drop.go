// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"strings"
	"sync"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/maps"
)

// The drop path's cases: against bare XDP_DROP, with the per-CPU
// refused-until cache on and off in the same run, the spoofed flood with a
// per-source and a global level, and two CPUs on one key against one.

const (
	mTBDropOff    = "token bucket, over limit (drop), refused cache off"
	mFWDropOff    = "fixed window, over limit (drop), refused cache off"
	mSWDropOff    = "sliding window, over limit (drop), refused cache off"
	mAggDropOff   = "token bucket + global aggregate, over the source's limit (drop), refused cache off"
	mTBPassOff    = "token bucket, under limit (pass), refused cache off"
	mAggPassOff   = "token bucket + global aggregate, under both (pass), refused cache off"
	mSpoofGDrop   = "16M random sources, per source + global, the global level over its limit (drop)"
	mSpoofGDropNC = mSpoofGDrop + ", refused cache off"
	// The same flood beside a SYN cookie rule, which turns the ACK check
	// on: the flow cache is then looked up without the source only after
	// the checks, as in any generation with lists or bans
	// (bpf/xdplimit.bpf.c, xdpl_source_free); against mSpoofGDrop, what
	// looking it up first saves.
	mSpoofGDropLate = mSpoofGDrop + ", a SYN cookie rule beside it (the lookup without the source after the checks)"
	mSpoofGPass     = "16M random sources, per source + global, both under (pass)"
	mSpoofGPassNC   = mSpoofGPass + ", refused cache off"
)

// perSourceAndGlobal is the veth comparison's shape: a per-source level
// behind a global aggregate.
func perSourceAndGlobal(own, global string) string {
	return oneRule(own) + "    aggregate:\n      - key: global\n        limit: " + global + "\n"
}

// addDropPathCases adds the drop path's cases to the micro benchmark.
func addDropPathCases(add func(*microCase, func(*microCase) (*ebpf.Program, error)),
	limiter func(maps.Options, string, map[string][]byte) func(*microCase) (*ebpf.Program, error), base uint32) {
	group := "Drop path: the refused-until cache off, and spoofed floods with a global level"
	off := maps.Options{Clock: maps.ClockCoarse, MaxSources: 1 << 16, NoRefusedCache: true}
	// What the cache costs the admitted path (a slot missed per level).
	for _, k := range []struct {
		name, yaml string
		want       uint32
	}{
		{mTBDropOff, oneRule(tbDrop), xdpDrop},
		{mFWDropOff, oneRule(fwDrop), xdpDrop},
		{mSWDropOff, oneRule(swDrop), xdpDrop},
		{mAggDropOff, perSourceAndGlobal(tbDrop, tbPass), xdpDrop},
		{mTBPassOff, oneRule(tbPass), xdpPass},
		{mAggPassOff, perSourceAndGlobal(tbPass, tbPass), xdpPass},
	} {
		add(&microCase{group: group, name: k.name, want: k.want, warm: 1000}, limiter(off, k.yaml, nil))
	}
	for _, s := range []struct {
		name, global string
		want         uint32
		noCache      bool
	}{
		{mSpoofGDrop, tbDrop, xdpDrop, false},
		{mSpoofGDropNC, tbDrop, xdpDrop, true},
		{mSpoofGPass, tbPass, xdpPass, false},
		{mSpoofGPassNC, tbPass, xdpPass, true},
	} {
		opts := maps.Options{Clock: maps.ClockCoarse, MaxSources: 1 << 20, BenchRotate: 1 << 24,
			BenchBase: microBase, NoRefusedCache: s.noCache}
		add(&microCase{group: group, name: s.name, want: s.want, warm: 1 << 20, rotate: 1 << 24, base: base},
			limiter(opts, perSourceAndGlobal(tbPass, s.global), nil))
	}
	add(&microCase{group: group, name: mSpoofGDropLate, want: xdpDrop, warm: 1 << 20, rotate: 1 << 24, base: base},
		limiter(maps.Options{Clock: maps.ClockCoarse, MaxSources: 1 << 20, BenchRotate: 1 << 24, BenchBase: microBase},
			strings.Replace(perSourceAndGlobal(tbPass, tbDrop), "rules:\n", "rules:\n"+cookieRule, 1), nil))
}

// cookieRule answers SYNs to port 8080 over a source's limit with cookies:
// it matches no UDP packet, but turns the check of ACKs against cookies on.
const cookieRule = `  - name: syn
    match: {protocol: tcp, dst_ports: [8080], tcp_flags: [syn]}
    limit: {algorithm: token_bucket, rate: 1/m, burst: 1}
    action: syncookie
`

// twoCPU is one key flooded from one CPU and from both at once.
type twoCPU struct {
	name     string
	one, two sample // ns per packet: CPU 1 alone; both CPUs (each CPU's own)
	err      error
}

// measureTwoCPU runs each case's program on CPU 1 alone, then on CPUs 0
// and 1 at once with the same key, rounds interleaved: the admitted path
// writes the key's shared state word from both CPUs (its line moves between
// them on every packet); the drop path only reads it, or answers from each
// CPU's own refused-until cache.
func (r *microResults) measureTwoCPU(e *env, names []string) {
	for _, n := range names {
		c := r.find(n)
		if c == nil || c.err != nil {
			continue
		}
		t := &twoCPU{name: n}
		r.TwoCPU = append(r.TwoCPU, t)
		for round := range r.Rounds {
			e.Logf("micro: two CPUs, %q, round %d of %d", n, round+1, r.Rounds)
			ns, err := benchOn(c, []int{1}, r.Repeat)
			if err == nil {
				t.one = append(t.one, ns...)
				ns, err = benchOn(c, []int{0, 1}, r.Repeat)
				t.two = append(t.two, ns...)
			}
			if err != nil {
				t.err = err
				break
			}
		}
	}
}

// benchOn runs repeat runs of c's frame on each of cpus at once and returns
// each CPU's ns per packet.
func benchOn(c *microCase, cpus []int, repeat int) ([]float64, error) {
	out := make([]float64, len(cpus))
	errs := make([]error, len(cpus))
	var start, done sync.WaitGroup
	start.Add(len(cpus))
	for i, cpu := range cpus {
		done.Add(1)
		go func() {
			defer done.Done()
			frame := append([]byte(nil), c.frame...)
			errs[i] = onPinnedThread(cpu, func() error {
				start.Done()
				start.Wait() // all threads pinned: start together
				var s slopeTimer
				for _, n := range s.counts(repeat) {
					ret, err := s.call(c.prog, frame, n)
					if err == nil && c.want != 0 && ret != c.want {
						err = fmt.Errorf("verdict %d, want %d", ret, c.want)
					}
					if err != nil {
						return err
					}
				}
				var err error
				out[i], err = s.perPacket()
				return err
			})
		}()
	}
	done.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (r *microResults) writeTwoCPU(b *strings.Builder) {
	if len(r.TwoCPU) == 0 {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("### One key from two CPUs at once\n\n")
	p("The same program and frame (one source) on CPU 1 alone, then on CPUs 0 and 1 at once, %d runs per\n", r.Repeat)
	p("call and CPU, alternating; ns/packet is each CPU's own (its thread's CPU time), so 1.00× means no slowdown from\n")
	p("sharing the key. On this VM the two CPUs are also what every other process runs on.\n\n")
	p("| Case | 1 CPU (ns/packet) | 2 CPUs (ns/packet, each) | 2 CPUs / 1 CPU |\n|---|---:|---:|---:|\n")
	for _, t := range r.TwoCPU {
		if t.err != nil {
			p("| %s | failed: %s | | |\n", t.name, errString(t.err))
			continue
		}
		p("| %s | %.1f | %.1f | %.2f× |\n", t.name, t.one.median(), t.two.median(), t.two.median()/t.one.median())
	}
	p("\n")
}
