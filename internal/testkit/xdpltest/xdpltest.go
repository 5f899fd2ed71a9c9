// SPDX-License-Identifier: Apache-2.0

package xdpltest

import (
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/compiler"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/policy"
)

// RequireBPF requires what loading and test-running the program takes:
// CAP_BPF (or CAP_SYS_ADMIN) and CAP_NET_ADMIN, which testutil.RequireRoot
// checks as capabilities, not as a uid (root in a container can lack them).
// Missing, the test fails in CI and skips elsewhere.
func RequireBPF(tb testing.TB) {
	tb.Helper()
	testutil.RequireRoot(tb)
}

// Compile parses, validates and compiles a policy given as YAML (named
// test.yaml in its errors and its Path), failing the test on error.
func Compile(tb testing.TB, yaml string) *maps.Image {
	tb.Helper()
	img, _ := CompilePolicy(tb, yaml)
	return img
}

// CompilePolicy is Compile that also returns the parsed policy, for tests
// that need its fleet:, log:, SHA256 or rules beside the image.
func CompilePolicy(tb testing.TB, yaml string) (*maps.Image, *policy.Policy) {
	tb.Helper()
	img, p, err := compiler.CompileYAML("test.yaml", []byte(yaml))
	if err != nil {
		tb.Fatalf("policy: %v", err)
	}
	return img, p
}

// Load loads the program with opts, unattached, and puts yaml's policy in
// force. opts go to maps.Load as they are: a zero MaxSources is the
// program's default table size. The program may be one an earlier test
// loaded with the same opts, its maps reset to a new limiter's (pool.go);
// when the test ends the limiter goes back for the next. A test must not
// keep using it after it ends, nor pin it.
func Load(tb testing.TB, opts maps.Options, yaml string) *maps.Limiter {
	tb.Helper()
	return LoadImage(tb, opts, Compile(tb, yaml))
}

// LoadImage is Load for a policy already compiled.
func LoadImage(tb testing.TB, opts maps.Options, img *maps.Image) *maps.Limiter {
	tb.Helper()
	RequireBPF(tb)
	l, key, err := take(opts)
	if err != nil {
		tb.Fatalf("load: %+v", err) // %+v: a verifier error in full
	}
	tb.Cleanup(func() { release(l, key) })
	if err := l.Apply(img); err != nil {
		tb.Fatalf("apply: %v", err)
	}
	return l
}

// LoadShared is Load without the cleanup, for a limiter that outlives
// the test that loads it: one shared by every call of a fuzz target, say.
// The caller closes it, or leaves it to the process's exit.
func LoadShared(tb testing.TB, opts maps.Options, yaml string) *maps.Limiter {
	tb.Helper()
	return open(tb, opts, Compile(tb, yaml))
}

func open(tb testing.TB, opts maps.Options, img *maps.Image) *maps.Limiter {
	tb.Helper()
	RequireBPF(tb)
	l, err := maps.Load(opts)
	if err != nil {
		tb.Fatalf("load: %+v", err) // %+v: a verifier error in full
	}
	if err := l.Apply(img); err != nil {
		l.Close()
		tb.Fatalf("apply: %v", err)
	}
	return l
}

// Run sets the injected clock (maps.ClockMap) to now, runs the program once
// on frame with BPF_PROG_TEST_RUN and returns its XDP verdict (1 drop, 2
// pass).
func Run(tb testing.TB, l *maps.Limiter, frame []byte, now time.Duration) uint32 {
	tb.Helper()
	if err := l.SetClock(uint64(now)); err != nil {
		tb.Fatal(err)
	}
	ret, err := l.Program().Run(&ebpf.RunOptions{Data: frame, Repeat: 1})
	if err != nil {
		tb.Fatalf("test run: %v", err)
	}
	return ret
}
