// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/compiler"
	"github.com/xdplimit/xdplimit/internal/cpupin"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/policy"
)

// sample is the measurements of one quantity over repetitions. Every number
// the report prints is a median with its range: a single run on a machine
// other people use says little.
type sample []float64

func (s sample) sorted() []float64 { c := slices.Clone(s); slices.Sort(c); return c }

func (s sample) median() float64 {
	if len(s) == 0 {
		return 0
	}
	c := s.sorted()
	if len(c)%2 == 1 {
		return c[len(c)/2]
	}
	return (c[len(c)/2-1] + c[len(c)/2]) / 2
}

func (s sample) min() float64 {
	if len(s) == 0 {
		return 0
	}
	return slices.Min(s)
}

func (s sample) max() float64 {
	if len(s) == 0 {
		return 0
	}
	return slices.Max(s)
}

func prefix(format string, args ...any) netip.Prefix {
	return netip.MustParsePrefix(fmt.Sprintf(format, args...))
}

// compilePolicy parses and compiles a policy. files are written next to it
// (allow-list netsets the policy names).
func compilePolicy(yaml string, files map[string][]byte) (*maps.Image, *policy.Policy, error) {
	path := "bench.yaml"
	if len(files) > 0 {
		dir, err := os.MkdirTemp("", "xdplbench-policy-")
		if err != nil {
			return nil, nil, err
		}
		defer os.RemoveAll(dir)
		for name, b := range files {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
				return nil, nil, err
			}
		}
		path = filepath.Join(dir, path)
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			return nil, nil, err
		}
	}
	img, p, err := compiler.CompileYAML(path, []byte(yaml))
	if err != nil {
		return nil, nil, fmt.Errorf("policy: %w", err)
	}
	return img, p, nil
}

// loadLimiter loads the limiter with opts and installs the policy.
func loadLimiter(opts maps.Options, yaml string, files map[string][]byte) (*maps.Limiter, error) {
	img, _, err := compilePolicy(yaml, files)
	if err != nil {
		return nil, err
	}
	return loadImage(opts, img)
}

// loadImage loads a limiter with a compiled policy in force.
func loadImage(opts maps.Options, img *maps.Image) (*maps.Limiter, error) {
	l, err := maps.Load(opts)
	if err != nil {
		return nil, err
	}
	if err := l.Apply(img); err != nil {
		l.Close()
		return nil, fmt.Errorf("apply: %w", err)
	}
	return l, nil
}

// bareDrop is the physical limit of an XDP program: return XDP_DROP and
// nothing else.
func bareDrop() (*ebpf.Program, error) {
	return ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "xdpl_bench_drop",
		Type: ebpf.XDP,
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R0, 1), // XDP_DROP
			asm.Return(),
		},
		License: "Dual BSD/GPL",
	})
}

// onPinnedThread runs fn on a thread of its own pinned to cpu and waits;
// the thread is discarded afterwards, so the affinity cannot leak.
// BPF_PROG_TEST_RUN ignores RunOptions.CPU for XDP, hence the affinity.
func onPinnedThread(cpu int, fn func() error) error {
	return try(func() error { return cpupin.OnCPU(cpu, fn) })
}

func monoNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// errString shortens an error for the report: a verifier log runs to
// thousands of lines, of which the first names the failure and the last
// ones say why.
func errString(err error) string {
	if err == nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(err.Error()), "\n")
	if len(lines) > 4 {
		lines = append(lines[:1:1], append([]string{"[...]"}, lines[len(lines)-2:]...)...)
	}
	for i := range lines {
		lines[i] = strings.TrimSpace(lines[i])
	}
	return strings.Join(lines, " ")
}
