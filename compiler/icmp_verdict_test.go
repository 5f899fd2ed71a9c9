// SPDX-License-Identifier: Apache-2.0

package compiler_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

// icmp lists and ranges through the real program under BPF_PROG_TEST_RUN:
// each message is classified to the first rule whose type list and code
// list both hold its values, in IPv4 and IPv6; the decision record says
// which rule.
func TestICMPListVerdicts(t *testing.T) {
	l := xdpltest.Load(t, maps.Options{Clock: maps.ClockMap, Record: true, MaxSources: 1 << 12}, `
rules:
  - {name: pings, match: {protocol: icmp, icmp: {type: [echo-request, echo-reply]}}, limit: {algorithm: token_bucket, rate: 1000/s, burst: 1000}}
  - {name: unreach, match: {protocol: icmp, icmp: {type: [dest-unreachable, 11], code: [0-3, 13]}}, limit: {algorithm: token_bucket, rate: 1000/s, burst: 1000}}
  - {name: codes, match: {protocol: icmp, icmp: {code: [5-6]}}, limit: {algorithm: token_bucket, rate: 1000/s, burst: 1000}}
  - {name: nd, match: {protocol: icmpv6, icmp: {type: [133-136, 128]}}, limit: {algorithm: token_bucket, rate: 1000/s, burst: 1000}}
  - {name: rest, limit: {algorithm: token_bucket, rate: 1000/s, burst: 1000}}
`)
	const rest = 4
	msg := func(src string, typ, code uint8) pktgen.Frame {
		s := netip.MustParseAddr(src)
		d := netip.MustParseAddr("10.0.0.1")
		if s.Is6() {
			d = netip.MustParseAddr("2001:db8::1")
		}
		return pktgen.Frame{Src: s, Dst: d, Proto: pktgen.ProtoICMP, ICMP: &pktgen.ICMPMessage{Type: typ, Code: code}}
	}
	nonFirst := func(f pktgen.Frame) pktgen.Frame {
		f.Frag, f.Payload = &pktgen.Fragment{Offset: 64}, 8
		return f
	}
	const v4, v6 = "192.0.2.1", "2001:db8:1::1"
	for _, tc := range []struct {
		name string
		f    pktgen.Frame
		rule int
	}{
		{"echo request", msg(v4, 8, 0), 0},
		{"echo reply", msg(v4, 0, 0), 0},
		{"echo request code 9", msg(v4, 8, 9), 0},
		{"timestamp request (not listed)", msg(v4, 13, 0), rest},
		{"net unreachable (range start)", msg(v4, 3, 0), 1},
		{"port unreachable (range end)", msg(v4, 3, 3), 1},
		{"frag needed (code 4, between)", msg(v4, 3, 4), rest},
		{"admin prohibited (code 13)", msg(v4, 3, 13), 1},
		{"time exceeded code 1", msg(v4, 11, 1), 1},
		{"time exceeded code 14", msg(v4, 11, 14), rest},
		{"redirect code 5 (code list only)", msg(v4, 5, 5), 2},
		{"unreachable code 6 (second rule misses, third has it)", msg(v4, 3, 6), 2},
		{"code 7", msg(v4, 5, 7), rest},
		{"v6 neighbor solicitation (range)", msg(v6, 135, 0), 3},
		{"v6 router solicitation (range start)", msg(v6, 133, 0), 3},
		{"v6 redirect 137 (past the range)", msg(v6, 137, 0), rest},
		{"v6 echo request", msg(v6, 128, 0), 3},
		{"v6 echo reply (not listed)", msg(v6, 129, 0), rest},
		{"v4 message with a v6-listed type", msg(v4, 135, 0), rest},
		// No ICMP header to read: matches every icmp constraint, as
		// fragments match every port list.
		{"v4 non-first fragment", nonFirst(msg(v4, 13, 0)), 0},
		{"v6 non-first fragment", nonFirst(msg(v6, 129, 0)), 3},
	} {
		passedByRule(t, l, tc.name, tc.f, tc.rule)
	}
}

// passedByRule runs f through l (recording its decisions, within every
// rule's limit) and checks that rule, by index, decided it and passed it.
func passedByRule(t *testing.T, l *maps.Limiter, name string, f pktgen.Frame, rule int) {
	t.Helper()
	if v := xdpltest.Run(t, l, f.MustBuild(), 10*time.Second); v != 2 {
		t.Errorf("%s: verdict %d, want pass", name, v)
	}
	d, err := l.LastDecision()
	if err != nil {
		t.Fatal(err)
	}
	if d.Why != maps.WhyRule || d.Rule != rule {
		t.Errorf("%s: decided by %v rule %d, want rule %d", name, d.Why, d.Rule, rule)
	}
}
