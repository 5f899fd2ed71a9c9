// SPDX-License-Identifier: Apache-2.0

package maps_test

import (
	"encoding/binary"
	"slices"
	"testing"

	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

// The signature fields under BPF_PROG_TEST_RUN: each packet is classified to
// the first rule whose length, ttl, dscp/tos or icmp it satisfies, in IPv4
// and IPv6; the decision record says which.
func TestSignatureFields(t *testing.T) {
	l := loadWith(t, maps.Options{Clock: maps.ClockMap, Record: true}, `
rules:
  - {name: echo4, match: {protocol: icmp, icmp: {type: echo-request}}, limit: {algorithm: token_bucket, rate: 1000/s, burst: 1000}}
  - {name: reply6, match: {protocol: icmpv6, icmp: {type: echo-reply}}, limit: {algorithm: token_bucket, rate: 1000/s, burst: 1000}}
  - {name: unreach, match: {protocol: icmp, icmp: {type: dest-unreachable, code: 3}}, limit: {algorithm: token_bucket, rate: 1000/s, burst: 1000}}
  - {name: unreach6, match: {protocol: icmpv6, icmp: {code: 4}}, limit: {algorithm: token_bucket, rate: 1000/s, burst: 1000}}
  - {name: len, match: {protocol: udp, length: [100-200]}, limit: {algorithm: token_bucket, rate: 1000/s, burst: 1000}}
  - {name: ttl, match: {protocol: udp, ttl: 250-255}, limit: {algorithm: token_bucket, rate: 1000/s, burst: 1000}}
  - {name: dscp, match: {protocol: udp, dscp: [46]}, limit: {algorithm: token_bucket, rate: 1000/s, burst: 1000}}
  - {name: tos, match: {protocol: tcp, tos: [16]}, limit: {algorithm: token_bucket, rate: 1000/s, burst: 1000}}
  - {name: rest, limit: {algorithm: token_bucket, rate: 1000/s, burst: 1000}}
`)
	const rest = 8
	icmp := func(f pktgen.Frame, typ, code uint8) pktgen.Frame {
		f.Proto, f.ICMP = pktgen.ProtoICMP, &pktgen.ICMPMessage{Type: typ, Code: code}
		return f
	}
	v4, v6 := udp4("192.0.2.1"), udp6("2001:db8:1::1")
	check := func(name string, rule int) {
		t.Helper()
		d, err := l.LastDecision()
		if err != nil {
			t.Fatal(err)
		}
		if d.Why != maps.WhyRule || d.Rule != rule {
			t.Errorf("%s: why %v rule %d, want rule %d", name, d.Why, d.Rule, rule)
		}
	}
	for _, tc := range []struct {
		name string
		f    pktgen.Frame
		rule int
	}{
		{"v4 echo request", icmp(v4, 8, 0), 0},
		{"v4 echo reply", icmp(v4, 0, 0), rest},
		{"v4 non-first fragment", nonFirst(icmp(v4, 0, 0), 8), 0},
		{"v6 echo request", icmp(v6, 128, 0), rest},
		{"v6 echo reply", icmp(v6, 129, 0), 1},
		{"v4 port unreachable", icmp(v4, 3, 3), 2},
		{"v4 host unreachable", icmp(v4, 3, 1), rest},
		{"v6 port unreachable", icmp(v6, 1, 4), 3},
		{"v6 address unreachable", icmp(v6, 1, 3), rest},
		{"v4 length 150", with(v4, func(f *pktgen.Frame) { f.Payload = 150 - 28 }), 4},
		{"v4 length 201", with(v4, func(f *pktgen.Frame) { f.Payload = 201 - 28 }), rest},
		{"v4 length 100", with(v4, func(f *pktgen.Frame) { f.Payload = 100 - 28 }), 4},
		{"v6 length 200", with(v6, func(f *pktgen.Frame) { f.Payload = 200 - 48 }), 4},
		{"v6 length 99", with(v6, func(f *pktgen.Frame) { f.Payload = 99 - 48 }), rest},
		{"v4 ttl 255", with(v4, func(f *pktgen.Frame) { f.TTL = 255 }), 5},
		{"v4 ttl 249", with(v4, func(f *pktgen.Frame) { f.TTL = 249 }), rest},
		{"v6 hop limit 250", with(v6, func(f *pktgen.Frame) { f.TTL = 250 }), 5},
		{"v4 dscp 46", with(v4, func(f *pktgen.Frame) { f.TOS = 46 << 2 }), 6},
		{"v4 dscp 46 ecn 3", with(v4, func(f *pktgen.Frame) { f.TOS = 46<<2 | 3 }), 6},
		{"v4 dscp 45", with(v4, func(f *pktgen.Frame) { f.TOS = 45 << 2 }), rest},
		{"v6 traffic class dscp 46", with(v6, func(f *pktgen.Frame) { f.TOS = 46<<2 | 1 }), 6},
		{"v6 traffic class dscp 0", v6, rest},
		// TCP segments with no flag set: the tos rule matches on tos alone.
		{"v4 tcp tos 16", with(v4, func(f *pktgen.Frame) { f.Proto, f.NoTCPFlags, f.TOS = pktgen.ProtoTCP, true, 16 }), 7},
		{"v6 tcp tos 17", with(v6, func(f *pktgen.Frame) { f.Proto, f.NoTCPFlags, f.TOS = pktgen.ProtoTCP, true, 17 }), rest},
		{"v6 tcp traffic class 16", with(v6, func(f *pktgen.Frame) { f.Proto, f.NoTCPFlags, f.TOS = pktgen.ProtoTCP, true, 16 }), 7},
	} {
		xdpltest.Run(t, l, tc.f.MustBuild(), t0)
		check(tc.name, tc.rule)
	}
	// An echo reply whose IP length ends after one byte of ICMP: type and
	// code unknown, so it matches the icmp rules (the stack drops it).
	cut := icmp(v4, 0, 0).MustBuild()
	binary.BigEndian.PutUint16(cut[14+2:], 21)
	pktgen.FixIPv4Checksum(cut)
	xdpltest.Run(t, l, cut, t0)
	check("v4 icmp cut short", 0)
}

// key: src_ip+src_port gives each source port of a source its own bucket:
// a reflector's port 53 and port 123 traffic are limited apart.
func TestKeySrcPort(t *testing.T) {
	l := load(t, maps.ClockMap, `
rules:
  - name: refl
    match: {protocol: udp}
    key: src_ip+src_port
    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}
`)
	dns, ntp := udp4("192.0.2.7"), udp4("192.0.2.7")
	dns.SrcPort, ntp.SrcPort = 53, 123
	otherDst := dns
	otherDst.DstPort = 9999
	six := udp6("2001:db8::7")
	six.SrcPort = 53
	var got []uint32
	for _, f := range []pktgen.Frame{dns, ntp, dns, otherDst, six, six} {
		got = append(got, xdpltest.Run(t, l, f.MustBuild(), t0))
	}
	if want := verdicts("PPDDPD"); !slices.Equal(got, want) {
		t.Fatalf("verdicts %s, want PPDDPD", letters(got))
	}
}
