// SPDX-License-Identifier: Apache-2.0

package maps_test

import (
	"io/fs"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/compiler"
	"github.com/xdplimit/xdplimit/examples"
	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

// exampleFrames is, for each policy in examples/, a frame that its rule
// named here must decide. Every example needs an entry: the test fails on
// an example without one.
var exampleFrames = map[string]struct {
	frame []byte
	rule  string
}{
	"amplification.yaml": {
		pktgen.UDP4(exampleAddr("198.51.100.1"), exampleAddr("10.0.0.1"), 53, 33000, 1200), "dns-amplification"},
	"icmp-echo-flood.yaml": {pktgen.ICMP4(exampleAddr("198.51.100.1"), exampleAddr("10.0.0.1"), 56), "echo"},
	"syn-fixed-ttl.yaml": {pktgen.Frame{Src: exampleAddr("198.51.100.1"), Dst: exampleAddr("10.0.0.1"), TTL: 252,
		Proto: pktgen.ProtoTCP, SrcPort: 40000, DstPort: 443}.MustBuild(), "syn-ttl-255"},
	"demo.yaml": {pktgen.UDP4(exampleAddr("198.51.100.1"), exampleAddr("10.0.0.1"), 4000, 9, 18), "udp-per-source"},
	"crowdsec.yaml": {
		pktgen.TCP4(exampleAddr("198.51.100.1"), exampleAddr("10.0.0.1"), 40000, 22, pktgen.TCPSyn, 0), "ssh"},
	"dns-amplification.yaml": {
		pktgen.UDP4(exampleAddr("198.51.100.1"), exampleAddr("10.0.0.1"), 53, 33000, 512), "dns-responses"},
	"fleet-dns.yaml": {
		pktgen.UDP4(exampleAddr("198.51.100.1"), exampleAddr("10.0.0.1"), 4000, 53, 40), "dns"},
	"icmp-flood.yaml": {pktgen.ICMP4(exampleAddr("198.51.100.1"), exampleAddr("10.0.0.1"), 56), "icmp"},
	"ipv6-64.yaml":    {pktgen.UDP6(exampleAddr("2001:db8:1:2::3"), exampleAddr("2001:db8::1"), 4000, 443, 100), "ipv6-per-64"},
	"per-24-budget.yaml": {
		pktgen.UDP4(exampleAddr("192.0.2.7"), exampleAddr("10.0.0.1"), 4000, 443, 100), "per-24-bytes"},
	"ssh-ban.yaml": {
		pktgen.TCP4(exampleAddr("198.51.100.1"), exampleAddr("10.0.0.1"), 40000, 22, pktgen.TCPSyn, 0), "ssh"},
	"syn-flood.yaml": {
		pktgen.TCP4(exampleAddr("198.51.100.1"), exampleAddr("10.0.0.1"), 40000, 443, pktgen.TCPSyn, 0), "web-syn"},
	"api-reject.yaml": {
		pktgen.TCP4(exampleAddr("198.51.100.1"), exampleAddr("10.0.0.1"), 40000, 443, pktgen.TCPSyn, 0), "api"},
	"syn-cookie.yaml": {
		pktgen.TCP4(exampleAddr("198.51.100.1"), exampleAddr("10.0.0.1"), 40000, 443, pktgen.TCPSyn, 0), "web-syn"},
	"router-conntrack.yaml": {
		pktgen.TCP4(exampleAddr("198.51.100.1"), exampleAddr("10.0.0.1"), 40000, 443, pktgen.TCPSyn, 0), "syn-per-source"},
	"udp-payload-flood.yaml": {pktgen.Frame{Src: exampleAddr("198.51.100.1"), Dst: exampleAddr("10.0.0.1"), SrcPort: 4000,
		DstPort: 27015, Data: []byte("\xff\xff\xff\xffTSoz")}.MustBuild(), "flood-header"},
	"ssh-login.yaml": {
		pktgen.TCP4(exampleAddr("198.51.100.1"), exampleAddr("10.0.0.1"), 40000, 22, pktgen.TCPSyn, 0), "ssh-syn"},
}

func exampleAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

// TestExamplesOnProgram compiles every example policy, applies it to the
// real program (as attach and policy test do), and runs a frame its rule
// matches: the examples are documentation, so they must work as written,
// not only parse (policy/examples_test.go checks that).
func TestExamplesOnProgram(t *testing.T) {
	// The embedded copies: the same files, and present wherever the test
	// binary runs (the VM has no source tree).
	files, err := fs.Glob(examples.FS, "*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples found (%v)", err)
	}
	seen := map[string]bool{}
	for _, path := range files {
		name := filepath.Base(path)
		seen[name] = true
		t.Run(name, func(t *testing.T) {
			c, ok := exampleFrames[name]
			if !ok {
				t.Fatalf("no frame for %s in exampleFrames: add one its first rules match", name)
			}
			xdpltest.RequireBPF(t)
			data, err := fs.ReadFile(examples.FS, path)
			if err != nil {
				t.Fatal(err)
			}
			img, p, err := compiler.CompileYAML("examples/"+path, data)
			if err != nil {
				t.Fatal(err)
			}
			// The replay's settings: the injected clock, decisions
			// recorded, every source tracked from its first packet.
			l := xdpltest.LoadImage(t, maps.Options{Clock: maps.ClockMap, Record: true, TrackAfter: 1, MaxSources: 1 << 12}, img)
			ret := xdpltest.Run(t, l, c.frame, 10*time.Second)
			d, err := l.LastDecision()
			if err != nil {
				t.Fatal(err)
			}
			if d.Why != maps.WhyRule || d.Rule < 0 || d.Rule >= len(p.Rules) || p.Rules[d.Rule].Name != c.rule {
				t.Fatalf("decided by %+v, want rule %s", d, c.rule)
			}
			// A first packet is within every limit.
			if d.Verdict != maps.VerdictPass || ret != 2 {
				t.Errorf("first packet: verdict %v (XDP %d), want pass", d.Verdict, ret)
			}
			stats, err := l.RuleStats()
			if err != nil {
				t.Fatal(err)
			}
			if len(stats) != len(p.Rules) || stats[d.Rule].Verdicts[maps.VerdictPass].Packets != 1 {
				t.Errorf("rule counters after one packet: %+v", stats)
			}
		})
	}
	for name := range exampleFrames {
		if !seen[name] {
			t.Errorf("exampleFrames has %s, which is not in examples/", name)
		}
	}
}
