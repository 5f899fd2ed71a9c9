package maps_test

import (
	"slices"
	"testing"

	"github.com/xdplimit/xdplimit/maps"
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
  - {name: len, match: {protocol: udp, length: [100-200]}, limit: {algorithm: token_bucket, rate: 1000/s, burst: 1000}}
  - {name: ttl, match: {protocol: udp, ttl: 250-255}, limit: {algorithm: token_bucket, rate: 1000/s, burst: 1000}}
  - {name: dscp, match: {protocol: udp, dscp: [46]}, limit: {algorithm: token_bucket, rate: 1000/s, burst: 1000}}
  - {name: tos, match: {protocol: tcp, tos: [16]}, limit: {algorithm: token_bucket, rate: 1000/s, burst: 1000}}
  - {name: rest, limit: {algorithm: token_bucket, rate: 1000/s, burst: 1000}}
`)
	const rest = 7
	icmp := func(f frame, typ, code uint8) frame {
		f.proto, f.icmpSet, f.icmpType, f.icmpCode = "icmp", true, typ, code
		return f
	}
	with := func(f frame, change func(*frame)) frame { change(&f); return f }
	v4, v6 := udp4("192.0.2.1"), udp6("2001:db8:1::1")
	for _, tc := range []struct {
		name string
		f    frame
		rule int
	}{
		{"v4 echo request", icmp(v4, 8, 0), 0},
		{"v4 echo reply", icmp(v4, 0, 0), rest},
		{"v4 non-first fragment", with(icmp(v4, 0, 0), func(f *frame) { f.fragOff = 8 }), 0},
		{"v6 echo request", icmp(v6, 128, 0), rest},
		{"v6 echo reply", icmp(v6, 129, 0), 1},
		{"v4 port unreachable", icmp(v4, 3, 3), 2},
		{"v4 host unreachable", icmp(v4, 3, 1), rest},
		{"v4 length 150", with(v4, func(f *frame) { f.payload = 150 - 28 }), 3},
		{"v4 length 201", with(v4, func(f *frame) { f.payload = 201 - 28 }), rest},
		{"v4 length 100", with(v4, func(f *frame) { f.payload = 100 - 28 }), 3},
		{"v6 length 200", with(v6, func(f *frame) { f.payload = 200 - 48 }), 3},
		{"v6 length 99", with(v6, func(f *frame) { f.payload = 99 - 48 }), rest},
		{"v4 ttl 255", with(v4, func(f *frame) { f.ttl = 255 }), 4},
		{"v4 ttl 249", with(v4, func(f *frame) { f.ttl = 249 }), rest},
		{"v6 hop limit 250", with(v6, func(f *frame) { f.ttl = 250 }), 4},
		{"v4 dscp 46", with(v4, func(f *frame) { f.tos = 46 << 2 }), 5},
		{"v4 dscp 46 ecn 3", with(v4, func(f *frame) { f.tos = 46<<2 | 3 }), 5},
		{"v4 dscp 45", with(v4, func(f *frame) { f.tos = 45 << 2 }), rest},
		{"v6 traffic class dscp 46", with(v6, func(f *frame) { f.tos = 46<<2 | 1 }), 5},
		{"v6 traffic class dscp 0", v6, rest},
		{"v4 tcp tos 16", with(v4, func(f *frame) { f.proto, f.tos = "tcp", 16 }), 6},
		{"v6 tcp tos 17", with(v6, func(f *frame) { f.proto, f.tos = "tcp", 17 }), rest},
		{"v6 tcp traffic class 16", with(v6, func(f *frame) { f.proto, f.tos = "tcp", 16 }), 6},
	} {
		run(t, l, tc.f.bytes(t), t0)
		d, err := l.LastDecision()
		if err != nil {
			t.Fatal(err)
		}
		if d.Why != maps.WhyRule || d.Rule != tc.rule {
			t.Errorf("%s: why %v rule %d, want rule %d", tc.name, d.Why, d.Rule, tc.rule)
		}
	}
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
	dns.sport, ntp.sport = 53, 123
	otherDst := dns
	otherDst.dport = 9999
	six := udp6("2001:db8::7")
	six.sport = 53
	var got []uint32
	for _, f := range []frame{dns, ntp, dns, otherDst, six, six} {
		got = append(got, run(t, l, f.bytes(t), t0))
	}
	if want := verdicts("PPDDPD"); !slices.Equal(got, want) {
		t.Fatalf("verdicts %s, want PPDDPD", letters(got))
	}
}
