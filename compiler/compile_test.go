// SPDX-License-Identifier: Apache-2.0

package compiler

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/policy"
)

// compileYAML is CompileYAML failing the test on error: internal/testkit/xdpltest
// has the same, but imports this package, so these tests cannot use it.
func compileYAML(t *testing.T, yaml string) *maps.Image {
	t.Helper()
	img, _, err := CompileYAML("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	return img
}

func has(b maps.Bitmap, i int) bool { return b.W[i/64]&(1<<(i%64)) != 0 }

// TestCompileDimensions: only constrained dimensions are looked up; a
// rule without a constraint on a looked-up dimension matches every value,
// and a port rule matches its ports and non-first fragments only.
func TestCompileDimensions(t *testing.T) {
	img := compileYAML(t, `
rules:
  - name: dns
    match: {protocol: udp, dst_ports: [53]}
    limit: {algorithm: token_bucket, rate: 10/s, burst: 10}
  - name: nets
    match: {src_cidrs: [10.0.0.0/8]}
    limit: {algorithm: fixed_window, packets: 10, window: 1s}
`)
	if want := maps.DimProto | maps.DimDport | maps.DimSrc; img.Dims != want {
		t.Errorf("dims %#x, want %#x", img.Dims, want)
	}
	if img.SPort != nil || img.TCPFlags != nil || img.VLAN != nil || img.Dst != nil {
		t.Error("an unused dimension has entries")
	}
	if len(img.DPort) != int(maps.PortSlots) || len(img.Proto) != int(maps.ProtoSlots) {
		t.Fatalf("%d port and %d protocol slots", len(img.DPort), len(img.Proto))
	}
	for _, c := range []struct {
		what      string
		b         maps.Bitmap
		dns, nets bool
	}{
		{"port 53", img.DPort[53], true, true},
		{"port 54", img.DPort[54], false, true},
		{"fragment", img.DPort[maps.PortIdxFrag], true, true},
		{"IPv4 UDP", img.Proto[17], true, true},
		{"IPv6 UDP", img.Proto[256+17], true, true},
		{"IPv4 TCP", img.Proto[6], false, true},
	} {
		if has(c.b, 0) != c.dns || has(c.b, 1) != c.nets {
			t.Errorf("%s: dns %v nets %v, want %v %v", c.what, has(c.b, 0), has(c.b, 1), c.dns, c.nets)
		}
	}
	// The longest prefix carries every rule that matches: /8 both, /0 the
	// unconstrained one only.
	for _, e := range img.Src {
		want := e.Prefix == netip.MustParsePrefix("10.0.0.0/8")
		if !has(e.Rules, 0) || has(e.Rules, 1) != want {
			t.Errorf("%v: %v", e.Prefix, e.Rules.W[0])
		}
	}
}

// TestCompileLevels: levels are evaluated global first, then by prefix
// length, and remember their place in the policy; shadow mode marks every
// rule.
func TestCompileLevels(t *testing.T) {
	img := compileYAML(t, `
mode: shadow
rules:
  - name: r
    limit: {algorithm: token_bucket, rate: 10/s, burst: 10}
    aggregate:
      - key: {ipv4_prefix: 24, ipv6_prefix: 48}
        limit: {algorithm: token_bucket, rate: 100/s, burst: 100}
      - key: global
        limit: {algorithm: sliding_window, packets: 1000, window: 1s}
`)
	if !img.Shadow || !img.Rules[0].Shadow {
		t.Error("shadow mode did not mark the image and its rule")
	}
	type level struct {
		origin int
		kind   uint8
	}
	var got []level
	for _, l := range img.Rules[0].Levels {
		got = append(got, level{l.Origin, l.KeyKind})
	}
	want := []level{{2, maps.KeyGlobal}, {1, maps.KeySrc}, {0, maps.KeySrc}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("levels {origin kind} %v, want %v", got, want)
	}
	if l := img.Rules[0].Levels[1]; l.V4Prefix != 24 || l.V6Prefix != 48 {
		t.Errorf("aggregate prefix /%d /%d", l.V4Prefix, l.V6Prefix)
	}
}

// TestCompileTooManyRules: what the datapath cannot hold is refused with
// the policy's path.
func TestCompileTooManyRules(t *testing.T) {
	p := &policy.Policy{Path: "big.yaml", Rules: make([]policy.Rule, maps.MaxRules+1)}
	if _, err := Compile(p); err == nil || !strings.Contains(err.Error(), "big.yaml") {
		t.Errorf("err %v, want one naming big.yaml", err)
	}
}

func TestCompileYAML(t *testing.T) {
	img, p, err := CompileYAML("t.yaml", []byte("rules:\n  - name: r\n    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(img.Rules) != 1 || len(p.Rules) != 1 || p.Path != "t.yaml" {
		t.Fatalf("image %d rules, policy %d rules, path %q", len(img.Rules), len(p.Rules), p.Path)
	}
	if _, _, err := CompileYAML("bad.yaml", []byte("rules:\n  - name: r\n    limit: {algorithm: nope}\n")); err == nil || !strings.Contains(err.Error(), "bad.yaml:") {
		t.Fatalf("a bad policy: %v, want an error naming bad.yaml:line", err)
	}
}

// TestCompileTrafficOneIn: the datapath has one sampling of every verdict;
// with both capture: and autopilot: it samples as often as the more
// demanding one asks.
func TestCompileTrafficOneIn(t *testing.T) {
	for _, c := range []struct {
		sections string
		want     uint32
	}{
		{"", 0},
		{"capture: {sample: 1/1024}\n", 1024},
		{"autopilot: {}\n", policy.DefaultAutopilotOneIn},
		{"autopilot: {sample: 1/256}\n", 256},
		{"capture: {sample: 1/1024}\nautopilot: {sample: 1/64}\n", 64},
		{"capture: {sample: 1/16}\nautopilot: {sample: 1/64}\n", 16},
	} {
		img := compileYAML(t, c.sections+"rules: []\n")
		if img.TrafficOneIn != c.want {
			t.Errorf("%q: one in %d, want %d", c.sections, img.TrafficOneIn, c.want)
		}
	}
}

// TestNamesAgree: the names maps gives the compiled key kinds and
// algorithms (what status --source and /v1/sources print) are the policy
// language's.
func TestNamesAgree(t *testing.T) {
	limits := map[policy.Algorithm]policy.Limit{
		policy.TokenBucket:   {Algorithm: policy.TokenBucket, Count: 10, Per: time.Second, Burst: 10},
		policy.FixedWindow:   {Algorithm: policy.FixedWindow, Count: 10, Window: time.Second},
		policy.SlidingWindow: {Algorithm: policy.SlidingWindow, Count: 10, Window: time.Second},
		policy.SlidingLog:    {Algorithm: policy.SlidingLog, Count: 10, Window: time.Second},
	}
	for alg, lim := range limits {
		for _, k := range []policy.KeyKind{policy.KeySrcIP, policy.KeySrcIPDstPort, policy.KeySrcIPSrcPort, policy.KeyGlobal} {
			ls, err := compileLevel(policy.Level{Key: policy.Key{Kind: k, IPv4Prefix: 32, IPv6Prefix: 64}, Limit: lim})
			if err != nil {
				t.Fatal(err)
			}
			if got := maps.KeyName(ls.KeyKind); got != k.String() {
				t.Errorf("key %v is named %q", k, got)
			}
			if got := maps.AlgorithmName(ls.Params.Algorithm); got != alg.String() {
				t.Errorf("algorithm %v is named %q", alg, got)
			}
		}
	}
}
