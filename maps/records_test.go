// SPDX-License-Identifier: Apache-2.0

package maps_test

import (
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

// What the program records beside its verdicts: the counters, the drop
// ring's samples and the decision record.

func TestCounters(t *testing.T) {
	l := load(t, maps.ClockMap, `
rules:
  - name: tb
    match: {protocol: udp}
    limit: {algorithm: token_bucket, rate: 1/s, burst: 2}
  - name: sh
    match: {protocol: tcp}
    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}
    action: shadow
allow: [192.0.2.0/24]
deny: [198.51.100.0/24]
`)
	for i := 0; i < 5; i++ {
		xdpltest.Run(t, l, udp4("203.0.113.1").MustBuild(), t0) // 2 pass, 3 drop
	}
	tcp := udp4("203.0.113.1")
	tcp.Proto, tcp.TCPFlags = pktgen.ProtoTCP, pktgen.TCPSyn
	for i := 0; i < 3; i++ {
		xdpltest.Run(t, l, tcp.MustBuild(), t0) // 1 pass, 2 shadow
	}
	xdpltest.Run(t, l, udp4("192.0.2.1").MustBuild(), t0)
	xdpltest.Run(t, l, udp4("198.51.100.1").MustBuild(), t0)
	icmp := udp4("203.0.113.2")
	icmp.Proto = pktgen.ProtoICMP
	xdpltest.Run(t, l, icmp.MustBuild(), t0)
	arp := make([]byte, 60)
	arp[12], arp[13] = 0x08, 0x06
	xdpltest.Run(t, l, arp, t0)
	trunc := udp4("203.0.113.3").MustBuild()[:14+12] // IPv4 header cut short
	xdpltest.Run(t, l, trunc, t0)
	truncUDP := udp4("203.0.113.3").MustBuild()[:14+20+4] // UDP header cut short
	xdpltest.Run(t, l, truncUDP, t0)

	stats, err := l.RuleStats()
	if err != nil {
		t.Fatal(err)
	}
	if len(stats) != 2 || stats[0].Name != "tb" || stats[1].Name != "sh" {
		t.Fatalf("rule stats %+v", stats)
	}
	check := func(what string, got, want uint64) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %d, want %d", what, got, want)
		}
	}
	udpLen := uint64(len(udp4("203.0.113.1").MustBuild()))
	check("tb pass", stats[0].Verdicts[maps.VerdictPass].Packets, 2)
	check("tb pass bytes", stats[0].Verdicts[maps.VerdictPass].Bytes, 2*udpLen)
	check("tb drop", stats[0].Verdicts[maps.VerdictDrop].Packets, 3)
	check("tb level 0 drops", stats[0].LevelDrops[0], 3)
	check("sh pass", stats[1].Verdicts[maps.VerdictPass].Packets, 1)
	check("sh shadow", stats[1].Verdicts[maps.VerdictShadow].Packets, 2)
	check("sh drop", stats[1].Verdicts[maps.VerdictDrop].Packets, 0)
	cs, err := l.Counters()
	if err != nil {
		t.Fatal(err)
	}
	check("allow", cs[maps.CounterAllow].Packets, 1)
	check("deny", cs[maps.CounterDeny].Packets, 1)
	check("unmatched", cs[maps.CounterUnmatched].Packets, 1)
	check("non-ip", cs[maps.CounterNonIP].Packets, 1)
	check("malformed", cs[maps.CounterMalformed].Packets, 2)
	check("new sources", cs[maps.CounterNewSource].Packets, 2)
	check("insert failures", cs[maps.CounterInsertFail].Packets, 0)
}

func TestDropRingSamples(t *testing.T) {
	testutil.PinCPU(t, 0) // samples are read ring by ring (per CPU); samples[0] below is the first run's
	l := loadWith(t, maps.Options{Clock: maps.ClockMap, SampleOneIn: 1}, `
rules:
  - name: r
    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}
deny: [198.51.100.0/24]
`)
	_, _, cursor, err := l.DropRing(nil)
	if err != nil {
		t.Fatal(err)
	}
	repeatRun(t, l, udp4("192.0.2.7").MustBuild(), 4)   // 1 pass, 3 drops
	repeatRun(t, l, udp6("2001:db8::7").MustBuild(), 3) // 1 pass, 2 drops
	repeatRun(t, l, udp4("198.51.100.9").MustBuild(), 2)
	samples, written, _, err := l.DropRing(cursor)
	if err != nil {
		t.Fatal(err)
	}
	bySource := map[string]int{}
	for _, s := range samples {
		bySource[s.Source.String()]++
		if s.Deny != (s.Source.String() == "198.51.100.9") {
			t.Errorf("sample %+v: deny flag wrong", s)
		}
	}
	if written != 7 || bySource["192.0.2.7"] != 3 || bySource["2001:db8::7"] != 2 || bySource["198.51.100.9"] != 2 {
		t.Errorf("written %d, samples by source %v", written, bySource)
	}
	// What the drop log prints: the fields of the frames udp4/udp6 build
	// (UDP 4000 -> 53, hop limit 64, no payload,
	// padded to Ethernet's 60 bytes).
	for _, s := range samples {
		level := 0
		if s.Deny {
			level = maps.NoLevel
		}
		ipLen := uint16(28)
		if s.Source.Is6() {
			ipLen = 48
		}
		want := maps.DropSample{Source: s.Source, Destination: netip.MustParseAddr("10.0.0.1"),
			Verdict: maps.VerdictDrop, Slot: s.Slot, Deny: s.Deny, Level: level, Bytes: max(60, 14+uint32(ipLen)),
			IPLength: ipLen, Protocol: 17, HasPorts: true, SrcPort: 4000, DstPort: 53, TTL: 64}
		if s.Source.Is6() {
			want.Destination = netip.MustParseAddr("2001:db8::1")
		}
		if s != want {
			t.Errorf("sample %+v\nwant   %+v", s, want)
		}
	}
	names, err := l.SlotNames()
	if err != nil || names[samples[0].Slot] != "r" {
		t.Errorf("slot names %v (%v)", names, err)
	}
}

func TestDecisionRecord(t *testing.T) {
	l := loadWith(t, maps.Options{Clock: maps.ClockMap, Record: true}, `
rules:
  - name: dns
    match: {protocol: udp, dst_ports: [53]}
    key: {ipv4_prefix: 24, ipv6_prefix: 64}
    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}
    aggregate:
      - key: global
        limit: {algorithm: token_bucket, rate: 1/s, burst: 100}
deny: [198.51.100.0/24]
`)
	for _, c := range []struct {
		pkt  []byte
		want maps.Decision
	}{
		{udp4("192.0.2.77").MustBuild(), maps.Decision{Why: maps.WhyRule, Verdict: maps.VerdictPass, Rule: 0, Level: -1}}, // admitted: the key is the first evaluated level's, the global one

		{udp4("192.0.2.78").MustBuild(), maps.Decision{Why: maps.WhyRule, Verdict: maps.VerdictDrop, Rule: 0, Level: 0,
			Source: netip.MustParseAddr("192.0.2.0")}}, // same /24: its own limit refused it
		{udp4("198.51.100.1").MustBuild(), maps.Decision{Why: maps.WhyDeny, Verdict: maps.VerdictDrop, Rule: -1, Level: -1}},
		{with(udp4("192.0.2.1"), func(f *pktgen.Frame) { f.DstPort = 80 }).MustBuild(),
			maps.Decision{Why: maps.WhyUnmatched, Verdict: maps.VerdictPass, Rule: -1, Level: -1}},
	} {
		xdpltest.Run(t, l, c.pkt, t0)
		got, err := l.LastDecision()
		if err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("decision %+v, want %+v", got, c.want)
		}
	}
}

// TestBenchParseOnly: the parse-only benchmark parses each frame and drops
// it before anything judges it: no rule or global counter moves, and an
// unparsed frame's action is not taken (the default would pass it).
func TestBenchParseOnly(t *testing.T) {
	l := loadWith(t, maps.Options{Clock: maps.ClockMap, BenchParseOnly: true}, `
rules:
  - name: r
    limit: {algorithm: token_bucket, rate: 1000/s, burst: 1000}
`)
	arp := make([]byte, 60)
	arp[12], arp[13] = 0x08, 0x06
	for _, c := range []struct {
		name string
		data []byte
	}{
		{"udp", udp4("192.0.2.1").MustBuild()},
		{"non-ip", arp},
		{"truncated", udp4("192.0.2.1").MustBuild()[:14+12]},
	} {
		v, err := l.Program().Run(&ebpf.RunOptions{Data: c.data, Repeat: 1})
		if err != nil {
			t.Fatal(err)
		}
		if v != xdpDrop {
			t.Errorf("%s: verdict %d, want XDP_DROP", c.name, v)
		}
	}
	cs, err := l.Counters()
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cs {
		if c.Packets != 0 {
			t.Errorf("counter %d counted %d packets", i, c.Packets)
		}
	}
	ups, err := l.UnparsedCounters()
	if err != nil {
		t.Fatal(err)
	}
	for k, c := range ups {
		if c.Packets != 0 {
			t.Errorf("unparsed kind %v counted %d frames", maps.UnparsedKind(k), c.Packets)
		}
	}
	stats, err := l.RuleStats()
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range stats {
		for v, c := range st.Verdicts {
			if c.Packets != 0 {
				t.Errorf("rule %s counted %d packets under verdict %d", st.Name, c.Packets, v)
			}
		}
	}
}
