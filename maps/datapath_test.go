package maps_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/compiler"
	"github.com/xdplimit/xdplimit/gen"
	"github.com/xdplimit/xdplimit/internal/netns"
	"github.com/xdplimit/xdplimit/internal/testutil"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/model"
	"github.com/xdplimit/xdplimit/policy"
)

const (
	xdpDrop = 1
	xdpPass = 2
)

// requireBPF fails under CI and skips elsewhere when the test cannot load
// programs: these tests run the real program on the real kernel.
func requireBPF(t testing.TB) {
	t.Helper()
	testutil.Require(t, os.Geteuid() == 0, "needs root (CAP_BPF) to load the XDP program")
}

func load(t *testing.T, clock maps.Clock, yaml string) *maps.Limiter {
	t.Helper()
	return loadWith(t, maps.Options{Clock: clock}, yaml)
}

type frame struct {
	src, dst netip.Addr
	proto    string // udp, tcp, icmp
	sport    uint16
	dport    uint16
	tcpFlags string // e.g. "S", "SA"
	vlans    []uint16
	payload  int
	fragOff  uint16 // IPv4: fragment offset in 8-byte units; IPv6: adds a fragment header
	ipv6Ext  int    // number of hop-by-hop/dest options headers
	ttl      uint8  // TTL or hop limit; 0 is 64
	tos      uint8  // TOS byte or traffic class
	icmpSet  bool   // icmpType and icmpCode are set; else an echo request
	icmpType uint8
	icmpCode uint8
}

func (f frame) bytes(t testing.TB) []byte {
	t.Helper()
	var ls []gopacket.SerializableLayer
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}}
	ls = append(ls, eth)
	var l3 layers.EthernetType = layers.EthernetTypeIPv4
	if f.src.Is6() {
		l3 = layers.EthernetTypeIPv6
	}
	if len(f.vlans) == 0 {
		eth.EthernetType = l3
	}
	for i, v := range f.vlans {
		if i == 0 {
			eth.EthernetType = layers.EthernetTypeDot1Q
			if len(f.vlans) > 1 {
				eth.EthernetType = layers.EthernetTypeQinQ
			}
		}
		next := l3
		if i+1 < len(f.vlans) {
			next = layers.EthernetTypeDot1Q
		}
		ls = append(ls, &layers.Dot1Q{VLANIdentifier: v, Type: next})
	}
	var ipProto layers.IPProtocol
	switch f.proto {
	case "tcp":
		ipProto = layers.IPProtocolTCP
	case "icmp":
		ipProto = layers.IPProtocolICMPv4
		if f.src.Is6() {
			ipProto = layers.IPProtocolICMPv6
		}
	default:
		ipProto = layers.IPProtocolUDP
	}
	var netLayer gopacket.NetworkLayer
	ttl := f.ttl
	if ttl == 0 {
		ttl = 64
	}
	if f.src.Is4() {
		ip := &layers.IPv4{Version: 4, IHL: 5, TTL: ttl, TOS: f.tos, Protocol: ipProto,
			SrcIP: f.src.AsSlice(), DstIP: f.dst.AsSlice(), FragOffset: f.fragOff}
		ls = append(ls, ip)
		netLayer = ip
	} else {
		ip := &layers.IPv6{Version: 6, HopLimit: ttl, TrafficClass: f.tos, NextHeader: ipProto,
			SrcIP: f.src.AsSlice(), DstIP: f.dst.AsSlice()}
		ls = append(ls, ip)
		netLayer = ip
		var raw []byte
		next := ipProto
		// Extension headers, innermost first, as raw bytes.
		if f.fragOff != 0 {
			raw = append([]byte{byte(next), 0, byte(f.fragOff >> 5), byte(f.fragOff << 3), 0, 0, 0, 1}, raw...)
			next = layers.IPProtocolIPv6Fragment
		}
		for i := 0; i < f.ipv6Ext; i++ {
			raw = append([]byte{byte(next), 0, 1, 4, 0, 0, 0, 0}, raw...) // PadN option
			next = layers.IPProtocolIPv6Destination
		}
		ip.NextHeader = next
		if len(raw) > 0 {
			ls = append(ls, gopacket.Payload(raw))
			if f.fragOff != 0 {
				ls = append(ls, gopacket.Payload(make([]byte, 8+f.payload)))
				return serialize(t, ls)
			}
		}
	}
	if f.src.Is4() && f.fragOff != 0 {
		ls = append(ls, gopacket.Payload(make([]byte, 8+f.payload)))
		return serialize(t, ls)
	}
	switch f.proto {
	case "tcp":
		tcp := &layers.TCP{SrcPort: layers.TCPPort(f.sport), DstPort: layers.TCPPort(f.dport), Window: 1024,
			SYN: strings.Contains(f.tcpFlags, "S"), ACK: strings.Contains(f.tcpFlags, "A"),
			RST: strings.Contains(f.tcpFlags, "R"), FIN: strings.Contains(f.tcpFlags, "F")}
		_ = tcp.SetNetworkLayerForChecksum(netLayer)
		ls = append(ls, tcp)
	case "icmp":
		typ, code := f.icmpType, f.icmpCode
		if !f.icmpSet {
			typ, code = 8, 0
			if f.src.Is6() {
				typ = 128
			}
		}
		if f.src.Is4() {
			ls = append(ls, &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(typ, code)})
		} else {
			ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(typ, code)}
			_ = ic.SetNetworkLayerForChecksum(netLayer)
			ls = append(ls, ic)
		}
	default:
		udp := &layers.UDP{SrcPort: layers.UDPPort(f.sport), DstPort: layers.UDPPort(f.dport)}
		_ = udp.SetNetworkLayerForChecksum(netLayer)
		ls = append(ls, udp)
	}
	ls = append(ls, gopacket.Payload(make([]byte, f.payload)))
	return serialize(t, ls)
}

func serialize(t testing.TB, ls []gopacket.SerializableLayer) []byte {
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func udp4(src string) frame {
	return frame{src: netip.MustParseAddr(src), dst: netip.MustParseAddr("10.0.0.1"), proto: "udp", sport: 4000, dport: 53}
}

func udp6(src string) frame {
	return frame{src: netip.MustParseAddr(src), dst: netip.MustParseAddr("2001:db8::1"), proto: "udp", sport: 4000, dport: 53}
}

func run(t testing.TB, l *maps.Limiter, pkt []byte, now time.Duration) uint32 {
	t.Helper()
	if err := l.SetClock(uint64(now)); err != nil {
		t.Fatal(err)
	}
	ret, err := l.Program().Run(&ebpf.RunOptions{Data: pkt, Repeat: 1})
	if err != nil {
		t.Fatalf("test run: %v", err)
	}
	return ret
}

func verdicts(s string) []uint32 {
	var v []uint32
	for _, c := range s {
		switch c {
		case 'P':
			v = append(v, xdpPass)
		case 'D':
			v = append(v, xdpDrop)
		}
	}
	return v
}

type step struct {
	f    frame
	at   time.Duration
	want string // sequence of P/D, one per packet sent at the same instant
}

const t0 = 10 * time.Second // injected time starts here

func TestVerdictFixtures(t *testing.T) {
	tb := `
rules:
  - name: tb
    match: {protocol: udp, dst_ports: [53]}
    limit: {algorithm: token_bucket, rate: 10/s, burst: 5}
`
	cases := []struct {
		name   string
		policy string
		steps  []step
	}{
		{"token bucket burst then refill", tb, []step{
			{udp4("192.0.2.10"), t0, "PPPPPDD"},
			{udp4("192.0.2.10"), t0 + 99*time.Millisecond, "D"},
			{udp4("192.0.2.10"), t0 + 100*time.Millisecond, "PD"},
			{udp4("192.0.2.10"), t0 + 350*time.Millisecond, "PPD"},
			{udp4("192.0.2.11"), t0 + 350*time.Millisecond, "PPPPPD"}, // its own bucket
			{udp4("192.0.2.10"), t0 + 10*time.Second, "PPPPPD"},       // full again, capped at burst
		}},
		{"token bucket ipv6 /64 shares one bucket", tb, []step{
			{udp6("2001:db8:1:2::1"), t0, "PPP"},
			{udp6("2001:db8:1:2:ffff::9"), t0, "PPD"},
			{udp6("2001:db8:1:3::1"), t0, "PPPPPD"},
		}},
		{"vlan tagged and double tagged frames are parsed", tb, []step{
			{func() frame { f := udp4("192.0.2.20"); f.vlans = []uint16{100}; return f }(), t0, "PPPPPD"},
			{func() frame { f := udp4("192.0.2.21"); f.vlans = []uint16{100, 200}; return f }(), t0, "PPPPPD"},
			{func() frame { f := udp6("2001:db8::21"); f.vlans = []uint16{7, 8}; return f }(), t0, "PPPPPD"},
		}},
		{"ipv6 extension headers are walked", tb, []step{
			{func() frame { f := udp6("2001:db8::30"); f.ipv6Ext = 3; return f }(), t0, "PPPPPD"},
			// Sources in other /64s (the default IPv6 key): 7 headers are
			// walked; 40, beyond the bound, are judged by source as a
			// fragment would be, never passed unjudged.
			{func() frame { f := udp6("2001:db8:0:1::31"); f.ipv6Ext = 7; return f }(), t0, "PPPPPD"},
			{func() frame { f := udp6("2001:db8:0:2::31"); f.ipv6Ext = 40; return f }(), t0, "PPPPPD"},
		}},
		{"non-first fragments are limited by address", tb, []step{
			{func() frame { f := udp4("192.0.2.40"); f.fragOff = 100; return f }(), t0, "PPPPPD"},
			{udp4("192.0.2.40"), t0, "D"}, // same bucket as its fragments
			{func() frame { f := udp6("2001:db8::40"); f.fragOff = 100; return f }(), t0, "PPPPPD"},
		}},
		{"unmatched traffic passes", tb, []step{
			{func() frame { f := udp4("192.0.2.50"); f.dport = 54; return f }(), t0, "PPPPPPPPPP"},
			{func() frame { f := udp4("192.0.2.50"); f.proto = "tcp"; f.tcpFlags = "S"; return f }(), t0, "PPPPPPPP"},
		}},
		{"first matching rule wins", `
rules:
  - name: dns
    match: {protocol: udp, dst_ports: [53]}
    limit: {algorithm: token_bucket, rate: 1/s, burst: 2}
  - name: all
    limit: {algorithm: token_bucket, rate: 1/s, burst: 4}
`, []step{
			{udp4("192.0.2.60"), t0, "PPDD"},
			{func() frame { f := udp4("192.0.2.60"); f.dport = 80; return f }(), t0, "PPPPD"},
			{func() frame { f := udp4("192.0.2.60"); f.proto = "icmp"; return f }(), t0, "D"}, // shares "all"'s bucket
		}},
		{"allow never limited, deny always dropped, longest prefix decides", `
rules:
  - name: all
    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}
allow: [192.0.2.0/24, "2001:db8:a::/48"]
deny: [198.51.100.0/24, 192.0.2.128/25]
`, []step{
			{udp4("192.0.2.1"), t0, "PPPPP"},
			{udp4("192.0.2.200"), t0, "DDD"},
			{udp4("198.51.100.7"), t0, "DDD"},
			{udp6("2001:db8:a::1"), t0, "PPPP"},
			{udp4("203.0.113.1"), t0, "PD"},
		}},
		// Host addresses live in hash maps, shorter prefixes in the tries:
		// a host still beats the prefix around it, either way round.
		{"host entries beat the prefixes around them", `
rules:
  - name: all
    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}
allow: [192.0.2.0/24, 198.51.100.9/32, "2001:db8:b::5/128"]
deny: [198.51.100.0/24, 192.0.2.77/32, "2001:db8:b::/48"]
`, []step{
			{udp4("198.51.100.9"), t0, "PPPP"},
			{udp4("198.51.100.8"), t0, "DDD"},
			{udp4("192.0.2.77"), t0, "DDD"},
			{udp4("192.0.2.1"), t0, "PPPP"},
			{udp6("2001:db8:b::5"), t0, "PPPP"},
			{udp6("2001:db8:b::6"), t0, "DDD"},
			{udp4("203.0.113.1"), t0, "PD"},
		}},
		{"host entries only", `
rules:
  - name: all
    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}
allow: [192.0.2.9/32]
deny: [192.0.2.10/32, "2001:db8::10/128"]
`, []step{
			{udp4("192.0.2.9"), t0, "PPPP"},
			{udp4("192.0.2.10"), t0, "DDD"},
			{udp6("2001:db8::10"), t0, "DDD"},
			{udp4("192.0.2.11"), t0, "PD"},
		}},
		{"fixed window", `
rules:
  - name: fw
    limit: {algorithm: fixed_window, packets: 3, window: 1s}
`, []step{
			{udp4("192.0.2.70"), t0 + 900*time.Millisecond, "PPPD"},
			{udp4("192.0.2.70"), t0 + 999*time.Millisecond, "D"},
			{udp4("192.0.2.70"), t0 + 1000*time.Millisecond, "PPPD"},
			{udp4("192.0.2.70"), t0 + 5500*time.Millisecond, "PPPD"},
		}},
		{"sliding window weighs the previous window", `
rules:
  - name: sw
    limit: {algorithm: sliding_window, packets: 4, window: 1s}
`, []step{
			{udp4("192.0.2.80"), t0, "PPPPD"},
			// 250 ms into the next window: 4 * 0.75 = 3 from the previous.
			{udp4("192.0.2.80"), t0 + 1250*time.Millisecond, "PD"},
			// 750 ms in: 4 * 0.25 = 1 + 1 current: 2 more.
			{udp4("192.0.2.80"), t0 + 1750*time.Millisecond, "PPD"},
			{udp4("192.0.2.80"), t0 + 3000*time.Millisecond, "PPPPD"},
		}},
		{"shadow action passes what it would drop", `
rules:
  - name: sh
    limit: {algorithm: token_bucket, rate: 1/s, burst: 2}
    action: shadow
`, []step{{udp4("192.0.2.90"), t0, "PPPPP"}}},
		{"tcp syn rule", `
rules:
  - name: syn
    match: {protocol: tcp, tcp_flags: [syn]}
    limit: {algorithm: token_bucket, rate: 1/s, burst: 2}
`, []step{
			{func() frame { f := udp4("192.0.2.95"); f.proto = "tcp"; f.tcpFlags = "S"; return f }(), t0, "PPDD"},
			{func() frame { f := udp4("192.0.2.95"); f.proto = "tcp"; f.tcpFlags = "SA"; return f }(), t0, "PPPP"},
		}},
		{"byte rate", `
rules:
  - name: bytes
    limit: {algorithm: token_bucket, rate: 1000B/s, burst: 300}
`, []step{
			// 42-byte headers + 58 payload = 100-byte frames.
			{func() frame { f := udp4("192.0.2.99"); f.payload = 58; return f }(), t0, "PPPD"},
			{func() frame { f := udp4("192.0.2.99"); f.payload = 58; return f }(), t0 + 100*time.Millisecond, "PD"},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := load(t, maps.ClockMap, c.policy)
			for i, s := range c.steps {
				pkt := s.f.bytes(t)
				want := verdicts(s.want)
				var got []uint32
				for range want {
					got = append(got, run(t, l, pkt, s.at))
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("step %d (%s at %v): verdicts %s, want %s", i, s.f.src, s.at-t0, letters(got), s.want)
				}
			}
		})
	}
}

func letters(v []uint32) string {
	var b strings.Builder
	for _, x := range v {
		switch x {
		case xdpPass:
			b.WriteByte('P')
		case xdpDrop:
			b.WriteByte('D')
		default:
			fmt.Fprintf(&b, "<%d>", x)
		}
	}
	return b.String()
}

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
		run(t, l, udp4("203.0.113.1").bytes(t), t0) // 2 pass, 3 drop
	}
	tcp := udp4("203.0.113.1")
	tcp.proto, tcp.tcpFlags = "tcp", "S"
	for i := 0; i < 3; i++ {
		run(t, l, tcp.bytes(t), t0) // 1 pass, 2 shadow
	}
	run(t, l, udp4("192.0.2.1").bytes(t), t0)
	run(t, l, udp4("198.51.100.1").bytes(t), t0)
	icmp := udp4("203.0.113.2")
	icmp.proto = "icmp"
	run(t, l, icmp.bytes(t), t0)
	arp := make([]byte, 60)
	arp[12], arp[13] = 0x08, 0x06
	run(t, l, arp, t0)
	trunc := udp4("203.0.113.3").bytes(t)[:14+12] // IPv4 header cut short
	run(t, l, trunc, t0)
	truncUDP := udp4("203.0.113.3").bytes(t)[:14+20+4] // UDP header cut short
	run(t, l, truncUDP, t0)

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
	udpLen := uint64(len(udp4("203.0.113.1").bytes(t)))
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

// TestModelAgreement replays random traces through the Go reference models
// and through the program with the same injected timestamps, and requires
// identical verdicts packet by packet.
func TestModelAgreement(t *testing.T) {
	type algo struct {
		name  string
		limit func(r *rand.Rand) (yaml string, p model.Params, bytes bool)
	}
	algos := []algo{
		{"token_bucket", func(r *rand.Rand) (string, model.Params, bool) {
			rate, burst := 1+r.Uint64N(5000), 1+r.Uint64N(50)
			p, err := model.TokenBucketParams(rate, time.Second, burst, false)
			if err != nil {
				t.Fatal(err)
			}
			return fmt.Sprintf("{algorithm: token_bucket, rate: %d/s, burst: %d}", rate, burst), p, false
		}},
		{"token_bucket_bytes", func(r *rand.Rand) (string, model.Params, bool) {
			rate, burst := 1000+r.Uint64N(500000), 1500+r.Uint64N(20000)
			p, err := model.TokenBucketParams(rate, time.Second, burst, true)
			if err != nil {
				t.Fatal(err)
			}
			return fmt.Sprintf("{algorithm: token_bucket, rate: %dB/s, burst: %d}", rate, burst), p, true
		}},
		{"fixed_window", func(r *rand.Rand) (string, model.Params, bool) {
			n, w := 1+r.Uint64N(100), time.Duration(1+r.IntN(500))*time.Millisecond
			p, _ := model.WindowParams(model.AlgFixedWindow, n, w)
			return fmt.Sprintf("{algorithm: fixed_window, packets: %d, window: %v}", n, w), p, false
		}},
		// Fleet levels: the token bucket also counts what it admitted for
		// the sync; the fixed window starts its windows at a phase.
		{"token_bucket_fleet", func(r *rand.Rand) (string, model.Params, bool) {
			rate, burst := 1+r.Uint64N(5000), 1+r.Uint64N(50)
			p, err := model.TokenBucketParams(rate, time.Second, burst, false)
			if err != nil {
				t.Fatal(err)
			}
			return fmt.Sprintf("{algorithm: token_bucket, rate: %d/s, burst: %d, scope: fleet}", rate, burst), p, false
		}},
		{"fixed_window_fleet", func(r *rand.Rand) (string, model.Params, bool) {
			n, w := 1+r.Uint64N(100), time.Duration(1+r.IntN(500))*time.Millisecond
			p, _ := model.WindowParams(model.AlgFixedWindow, n, w)
			return fmt.Sprintf("{algorithm: fixed_window, packets: %d, window: %v, scope: fleet}", n, w), p, false
		}},
		{"sliding_window", func(r *rand.Rand) (string, model.Params, bool) {
			n, w := 1+r.Uint64N(100), time.Duration(1+r.IntN(500))*time.Millisecond
			p, _ := model.WindowParams(model.AlgSlidingWindow, n, w)
			return fmt.Sprintf("{algorithm: sliding_window, packets: %d, window: %v}", n, w), p, false
		}},
		// Limits from 1 to the most a log holds; the time of each
		// admission wraps around the log many times per trace.
		{"sliding_log", func(r *rand.Rand) (string, model.Params, bool) {
			n, w := 1+r.Uint64N(model.LogMax), time.Duration(1+r.IntN(500))*time.Millisecond
			p, err := model.SlidingLogParams(n, w)
			if err != nil {
				t.Fatal(err)
			}
			return fmt.Sprintf("{algorithm: sliding_log, packets: %d, window: %v}", n, w), p, false
		}},
		{"sliding_window_bytes", func(r *rand.Rand) (string, model.Params, bool) {
			n, w := 2000+r.Uint64N(100000), time.Duration(1+r.IntN(500))*time.Millisecond
			p, _ := model.WindowParams(model.AlgSlidingWindow, n, w)
			return fmt.Sprintf("{algorithm: sliding_window, bytes: %d, window: %v}", n, w), p, true
		}},
	}
	for _, a := range algos {
		t.Run(a.name, func(t *testing.T) {
			for trial := 0; trial < 4; trial++ {
				seed := uint64(trial*7919 + len(a.name))
				r := rand.New(rand.NewPCG(seed, 1))
				lim, params, bytes := a.limit(r)
				// The models are of the algorithms: the admission sketch
				// (which delays a key's entry to its second packet) is off
				// here and tested on its own.
				head := ""
				if strings.Contains(lim, "scope: fleet") {
					head = "fleet: {redis: redis://127.0.0.1:6379/0}\n"
				}
				l := loadWith(t, maps.Options{Clock: maps.ClockMap, TrackAfter: 1}, head+"rules:\n  - name: r\n    limit: "+lim+"\n")
				if head != "" {
					fls, err := l.FleetLevels()
					if err != nil || len(fls) != 1 {
						t.Fatalf("fleet levels: %v %v", fls, err)
					}
					params.P3 = fls[0].P3
					if fls[0].Algorithm == maps.AlgFixedWindow {
						// A reserve below the limit, as a fleet of
						// hosts would set it.
						params.Reserve = r.Uint64N(params.P2)
						if err := l.SetFleetReserves(map[uint32]uint64{fls[0].StateID: params.Reserve}); err != nil {
							t.Fatal(err)
						}
					}
				}
				// A handful of sources, bursty arrivals, some long gaps.
				srcs := []frame{udp4("192.0.2.1"), udp4("192.0.2.2"), udp6("2001:db8::1"), udp4("192.0.2.3")}
				states := make([]model.State, len(srcs))
				now := uint64(t0) + r.Uint64N(uint64(time.Second))
				meanGap := uint64(time.Second) / (1 + r.Uint64N(20000))
				for i := 0; i < 3000; i++ {
					switch r.IntN(100) {
					case 0:
						now += r.Uint64N(uint64(3 * time.Second))
					default:
						now += r.Uint64N(2 * meanGap)
					}
					s := r.IntN(len(srcs))
					f := srcs[s]
					f.payload = r.IntN(1400)
					pkt := f.bytes(t)
					cost := uint64(1)
					if bytes {
						cost = uint64(len(pkt))
					}
					want := uint32(xdpDrop)
					if states[s].Admit(params, now, cost) {
						want = xdpPass
					}
					if got := run(t, l, pkt, time.Duration(now)); got != want {
						t.Fatalf("seed %d limit %s: packet %d (source %d, t=%d, cost %d): program %s, model %s",
							seed, lim, i, s, now, cost, letters([]uint32{got}), letters([]uint32{want}))
					}
				}
			}
		})
	}
}

// TestAccuracyAcrossCPUs drives one source from both CPUs at once on the
// real clock and requires the admitted count to be within 5% of what the
// limit allows over the time packets were offered; a per-CPU bucket would
// admit twice that. Each CPU makes one long test-run call: every call costs
// a fixed ~16 ms in which no packet is offered and a bucket refills past its
// burst, so many short calls would undercount the offered time.
func TestAccuracyAcrossCPUs(t *testing.T) {
	testutil.Require(t, runtime.NumCPU() >= 2, "needs 2 CPUs, have %d", runtime.NumCPU())
	const window = 20 * time.Millisecond
	for _, c := range []struct {
		name  string
		clock maps.Clock
		limit string
		// admissions allowed for a flood between two CLOCK_MONOTONIC times
		expect func(start, end int64) float64
	}{
		// Bursts of 50 ms absorb the gaps between a thread's time slices,
		// in which refill beyond the burst would be lost; twice the limit,
		// as per-CPU buckets admit, still shows.
		{"token_bucket ktime", maps.ClockKtime, "{algorithm: token_bucket, rate: 200000/s, burst: 10000}",
			func(s, e int64) float64 { return 10000 + 200000*float64(e-s)/1e9 }},
		// A burst longer than a few ticks: the coarse clock serves it.
		{"token_bucket coarse", maps.ClockCoarse, "{algorithm: token_bucket, rate: 200000/s, burst: 10000}",
			func(s, e int64) float64 { return 10000 + 200000*float64(e-s)/1e9 }},
		// A flood fills every window it touches, the first and last
		// partly covered ones too; windows are aligned on CLOCK_MONOTONIC.
		{"fixed_window", maps.ClockCoarse, "{algorithm: fixed_window, packets: 4000, window: 20ms}",
			func(s, e int64) float64 { return 4000 * float64(e/int64(window)-s/int64(window)+1) }},
		{"sliding_window", maps.ClockCoarse, "{algorithm: sliding_window, packets: 4000, window: 20ms}",
			func(s, e int64) float64 { return 4000 * float64(e/int64(window)-s/int64(window)+1) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			pkt := udp4("192.0.2.1").bytes(t)
			// A busy machine preempts the flood, and refill during a gap
			// in the offered load is lost: such a run cannot judge the
			// limiter. Try again, and fail if the machine never quietens.
			var pass, want, ratio float64
			policy := "rules:\n  - name: r\n    limit: " + c.limit + "\n"
			repeat := floodRuns(t, c.clock, policy, pkt)
			for attempt := 1; ; attempt++ {
				l := load(t, c.clock, policy)
				start, end, busy, err := flood(l, pkt, repeat)
				if err != nil {
					t.Fatal(err)
				}
				stats, err := l.RuleStats()
				if err != nil {
					t.Fatal(err)
				}
				pass = float64(stats[0].Verdicts[maps.VerdictPass].Packets)
				drop := float64(stats[0].Verdicts[maps.VerdictDrop].Packets)
				want = c.expect(start, end)
				wall := time.Duration(end - start)
				ratio = pass / want
				t.Logf("offered %.0f packets from 2 CPUs over %v (%.1f Mpps; each CPU running %.0f%% of it), admitted %.0f, expected %.0f: ratio %.4f",
					pass+drop, wall, (pass+drop)/wall.Seconds()/1e6, 100*busy, pass, want, ratio)
				// Gaps shorter than the 50 ms bursts lose no refill:
				// runs with the threads on CPU at least half the time
				// are measured 0.97-1.00 even next to a qemu guest.
				if busy >= 0.5 {
					break
				}
				if attempt == 3 {
					t.Fatalf("the machine is too busy to measure accuracy: the flooding threads ran only %.0f%% of the time", 100*busy)
				}
			}
			// Time runs unevenly under emulation (the 6.1 VM suite): there
			// the run checks that the limit holds, not to 5%.
			tol := 0.05
			if os.Getenv("XDPLIMIT_VM") != "" {
				tol = 0.25
			}
			if ratio < 1-tol || ratio > 1+tol {
				t.Errorf("admitted/expected = %.4f, want within %.0f%%", ratio, 100*tol)
			}
		})
	}
}

// floodRuns is how many runs of pkt on each CPU make a flood of about a
// second on this machine, measured on a limiter of the test's policy that
// the flood itself does not use (its bucket would start drained); under
// emulation a fixed count, without the probe. The
// fixed cost of a test-run call (~16 ms, in which no packet is offered and
// the limit refills) must stay a small part of the flood: a fixed 12M runs
// took 0.3 s on a CPU whose empty program costs 6 ns, and that cost alone
// then took up 5% of the span, the whole tolerance.
func floodRuns(t *testing.T, clock maps.Clock, policy string, pkt []byte) int {
	t.Helper()
	if os.Getenv("XDPLIMIT_VM") != "" {
		return 1_500_000 // ~1 Mpps under emulation
	}
	_, perPacket, err := load(t, clock, policy).Program().Benchmark(pkt, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 12_000_000
	if perPacket > 0 {
		n = int(time.Second / perPacket)
	}
	return min(max(n, 12_000_000), 200_000_000)
}

// flood runs the program on pkt from both CPUs at once, repeat times each,
// and returns when it started and ended on CLOCK_MONOTONIC (the clock the
// datapath reads) and the share of that span each CPU spent running the
// program, which the kernel reports net of preemption.
func flood(l *maps.Limiter, pkt []byte, repeat int) (int64, int64, float64, error) {
	ran := make([]time.Duration, 2)
	begin, end := make([]int64, 2), make([]int64, 2)
	err := onBothCPUs(func(cpu int) error {
		begin[cpu] = mono()
		_, perPacket, err := l.Program().Benchmark(pkt, repeat, nil)
		end[cpu] = mono()
		ran[cpu] = perPacket * time.Duration(repeat)
		return err
	})
	if err != nil {
		return 0, 0, 0, err
	}
	s, e := min(begin[0], begin[1]), max(end[0], end[1])
	busy := float64(min(ran[0], ran[1])) / float64(e-s)
	return s, e, busy, nil
}

// onBothCPUs runs f on CPU 0 and on CPU 1 at once, each on a thread pinned
// to its CPU, both started together once both are pinned.
func onBothCPUs(f func(cpu int) error) error {
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make([]error, 2)
	for cpu := 0; cpu < 2; cpu++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			unpin, err := netns.Pin(cpu)
			if errs[cpu] = err; err != nil {
				return
			}
			defer unpin()
			<-start
			errs[cpu] = f(cpu)
		}()
	}
	close(start)
	wg.Wait()
	return errors.Join(errs...)
}

// mono reads CLOCK_MONOTONIC, the clock the datapath reads.
func mono() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// compileYAML compiles a policy given as YAML.
func compileYAML(t testing.TB, yaml string) *maps.Image {
	t.Helper()
	p, err := policy.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	img, err := compiler.Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func loadWith(t *testing.T, opts maps.Options, yaml string) *maps.Limiter {
	t.Helper()
	requireBPF(t)
	img := compileYAML(t, yaml)
	if opts.MaxSources == 0 {
		opts.MaxSources = 1 << 16
	}
	l, err := maps.Load(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if err := l.Apply(img); err != nil {
		t.Fatal(err)
	}
	return l
}

// Aggregate levels are checked before the per-source table and nothing is
// charged for a refused packet: a source over its own limit does not spend
// the global budget, and a flood refused globally creates no per-source
// entries.
func TestAggregateLevels(t *testing.T) {
	l := load(t, maps.ClockMap, `
rules:
  - name: r
    limit: {algorithm: token_bucket, rate: 1/s, burst: 2}
    aggregate:
      - key: global
        limit: {algorithm: token_bucket, rate: 1/s, burst: 5}
`)
	heavy := udp4("192.0.2.1").bytes(t)
	// The heavy source gets its own 2; its 8 refused packets cost the
	// global bucket nothing, so 3 other sources still get the rest.
	if got := letters(repeatRun(t, l, heavy, 10)); got != "PPDDDDDDDD" {
		t.Fatalf("heavy source: %s", got)
	}
	var others []uint32
	for i := 2; i < 8; i++ {
		others = append(others, run(t, l, udp4(fmt.Sprintf("192.0.2.%d", i)).bytes(t), t0))
	}
	if got := letters(others); got != "PPPDDD" {
		t.Errorf("other sources after the heavy one: %s, want the global bucket's remaining 3", got)
	}
	stats, _ := l.RuleStats()
	// Level drops are reported in policy order: 0 = own, 1 = the global.
	if d := stats[0].LevelDrops; d[0] != 8 || d[1] != 3 {
		t.Errorf("level drops %v, want [8 3]", d)
	}
	cs, _ := l.Counters()
	// A limit of 1/s is below what an untracked key could pass, so keys
	// are tracked from their first packet: the heavy source's and the 3
	// admitted others'; the 3 refused by the global level never reached
	// the per-source table. The global level's state is its slot in
	// xdpl_globals, no table entry.
	if n := cs[maps.CounterNewSource].Packets; n != 4 {
		t.Errorf("%d state entries created, want 4", n)
	}
}

func repeatRun(t *testing.T, l *maps.Limiter, pkt []byte, n int) []uint32 {
	var v []uint32
	for i := 0; i < n; i++ {
		v = append(v, run(t, l, pkt, t0))
	}
	return v
}

// TestGlobalLevelReload: a global level's state lives at a slot of
// xdpl_globals. A reload that keeps the level keeps its slot and so its
// bucket; a changed limit starts from a fresh one; a slot freed by one
// reload and taken by a new level at the next is zeroed first.
func TestGlobalLevelReload(t *testing.T) {
	policyWith := func(burst int) string {
		return fmt.Sprintf(`
rules:
  - name: r
    limit: {algorithm: token_bucket, rate: 1000000/s, burst: 1000000}
    aggregate:
      - key: global
        limit: {algorithm: token_bucket, rate: 1/s, burst: %d}
`, burst)
	}
	l := loadWith(t, maps.Options{Clock: maps.ClockMap}, policyWith(3))
	apply := func(yaml string) {
		if err := l.Apply(compileYAML(t, yaml)); err != nil {
			t.Fatal(err)
		}
	}
	flood := func(n int) string {
		var v []uint32
		for i := 1; i <= n; i++ {
			v = append(v, run(t, l, udp4(fmt.Sprintf("192.0.2.%d", i)).bytes(t), t0))
		}
		return letters(v)
	}
	if got := flood(5); got != "PPPDD" {
		t.Errorf("first policy: %s, want the global burst of 3", got)
	}
	apply(policyWith(3))
	if got := flood(2); got != "DD" {
		t.Errorf("after a reload that keeps the level: %s, want its spent bucket", got)
	}
	apply(policyWith(4))
	if got := flood(5); got != "PPPPD" {
		t.Errorf("after a reload that changes the limit: %s, want a fresh burst of 4", got)
	}
	// The level in force holds the second slot; the new one takes the
	// first, which still holds the spent bucket of the first policy.
	apply(policyWith(3))
	if got := flood(5); got != "PPPDD" {
		t.Errorf("a new level on a reused slot: %s, want a fresh burst of 3", got)
	}
}

func TestDropRingSamples(t *testing.T) {
	pinCPU(t, 0) // samples are read ring by ring (per CPU); samples[0] below is the first run's
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
	repeatRun(t, l, udp4("192.0.2.7").bytes(t), 4)   // 1 pass, 3 drops
	repeatRun(t, l, udp6("2001:db8::7").bytes(t), 3) // 1 pass, 2 drops
	repeatRun(t, l, udp4("198.51.100.9").bytes(t), 2)
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

// The benchmark rotation makes every re-run of one buffer a new source: with
// the sketch none of them costs an insert; without it every one does.
func TestBenchRotation(t *testing.T) {
	for _, c := range []struct {
		trackAfter         uint32
		inserts, untracked uint64
	}{{0, 0, 1 << 10}, {1, 1 << 10, 0}} {
		l := loadWith(t, maps.Options{Clock: maps.ClockMap, TrackAfter: c.trackAfter, BenchRotate: 1 << 10,
			BenchBase: netip.MustParseAddr("10.0.0.0")}, `
rules:
  - name: r
    limit: {algorithm: token_bucket, rate: 1000/s, burst: 1}
`)
		if _, err := l.Program().Run(&ebpf.RunOptions{Data: udp4("10.0.0.0").bytes(t), Repeat: 1 << 10}); err != nil {
			t.Fatal(err)
		}
		cs, _ := l.Counters()
		stats, _ := l.RuleStats()
		// Count-min collisions track a few sources early: a handful of
		// inserts among 1024 one-packet sources, never fewer untracked.
		if cs[maps.CounterNewSource].Packets+cs[maps.CounterUntracked].Packets != 1<<10 ||
			cs[maps.CounterNewSource].Packets > c.inserts+(1<<10)/8 || cs[maps.CounterNewSource].Packets < c.inserts ||
			stats[0].Verdicts[maps.VerdictPass].Packets != 1<<10 {
			t.Errorf("track after %d: %d inserts, %d untracked, %d passed over 1024 distinct sources, want %d, %d, 1024",
				c.trackAfter, cs[maps.CounterNewSource].Packets, cs[maps.CounterUntracked].Packets,
				stats[0].Verdicts[maps.VerdictPass].Packets, c.inserts, c.untracked)
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
		{"udp", udp4("192.0.2.1").bytes(t)},
		{"non-ip", arp},
		{"truncated", udp4("192.0.2.1").bytes(t)[:14+12]},
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

// TestSketchMarks: the sketch sends a key to the state table only while its
// cells are marked, which a hit does and an insert does not. A tracked
// source that keeps sending is charged for every packet; after a pause of
// over a mark epoch its first packet is counted in the sketch like a new
// key's and passes uncharged (the bound design.md states), and its second
// finds its entry again instead of inserting a fresh one. Both the
// single-level path and the two-phase one (with an aggregate) are covered.
func TestSketchMarks(t *testing.T) {
	const mark = time.Duration(1) << gen.XdplimitXdplConstXDPL_SKETCH_MARK_SHIFT
	base := 40 * mark // the start of a mark epoch and of a count epoch
	for _, c := range []struct{ name, rule string }{
		{"single level", ""},
		{"with an aggregate", "    aggregate:\n      - key: global\n        limit: {algorithm: token_bucket, rate: 1000000/s, burst: 1000000}\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			pinCPU(t, 0) // the sketch is per CPU; a subtest has its own thread
			l := loadWith(t, maps.Options{Clock: maps.ClockMap}, `
rules:
  - name: r
    limit: {algorithm: token_bucket, rate: 1000/s, burst: 10}
`+c.rule)
			pkt := udp4("192.0.2.9").bytes(t)
			burst := func(at time.Duration, n int) string {
				var v []uint32
				for i := 0; i < n; i++ {
					v = append(v, run(t, l, pkt, at))
				}
				return letters(v)
			}
			for _, step := range []struct {
				what              string
				at                time.Duration
				n                 int
				want              string
				untracked, insert uint64
			}{
				// First packet untracked, the second inserts, then the
				// bucket (burst 10) decides.
				{"new source", base, 20, "PPPPPPPPPPPDDDDDDDDD", 1, 1},
				// 100 ms later, same mark epoch: refilled to its burst,
				// every packet charged.
				{"same mark epoch", base + 100*time.Millisecond, 20, "PPPPPPPPPPDDDDDDDDDD", 1, 1},
				// In the next mark epoch the marks from the last still
				// count.
				{"next mark epoch", base + mark + 100*time.Millisecond, 20, "PPPPPPPPPPDDDDDDDDDD", 1, 1},
				// Two mark epochs of silence: the marks lapsed. One
				// packet passes uncharged; the second finds the entry
				// (no new insert), whose bucket decides again.
				{"after a pause", base + 3*mark + 50*time.Millisecond, 20, "PPPPPPPPPPPDDDDDDDDD", 2, 1},
				{"marked again", base + 3*mark + 50*time.Millisecond, 5, "DDDDD", 2, 1},
			} {
				if got := burst(step.at, step.n); got != step.want {
					t.Errorf("%s: %s, want %s", step.what, got, step.want)
				}
				cs, err := l.Counters()
				if err != nil {
					t.Fatal(err)
				}
				if u, n := cs[maps.CounterUntracked].Packets, cs[maps.CounterNewSource].Packets; u != step.untracked ||
					n != step.insert {
					t.Errorf("%s: %d untracked, %d inserts, want %d and %d",
						step.what, u, n, step.untracked, step.insert)
				}
			}
		})
	}
}

// pinCPU keeps the test's thread on one CPU (and so on one sketch region)
// until the test ends.
func pinCPU(t testing.TB, cpu int) {
	t.Helper()
	unpin, err := netns.Pin(cpu)
	if err != nil {
		t.Fatal(err)
	}
	// Cleanups run on the test's goroutine, still on the pinned thread.
	t.Cleanup(unpin)
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
		{udp4("192.0.2.77").bytes(t), maps.Decision{Why: maps.WhyRule, Verdict: maps.VerdictPass, Rule: 0, Level: -1}}, // admitted: the key is the first evaluated level's, the global one

		{udp4("192.0.2.78").bytes(t), maps.Decision{Why: maps.WhyRule, Verdict: maps.VerdictDrop, Rule: 0, Level: 0,
			Source: netip.MustParseAddr("192.0.2.0")}}, // same /24: its own limit refused it
		{udp4("198.51.100.1").bytes(t), maps.Decision{Why: maps.WhyDeny, Verdict: maps.VerdictDrop, Rule: -1, Level: -1}},
		{func() []byte { f := udp4("192.0.2.1"); f.dport = 80; return f.bytes(t) }(),
			maps.Decision{Why: maps.WhyUnmatched, Verdict: maps.VerdictPass, Rule: -1, Level: -1}},
	} {
		run(t, l, c.pkt, t0)
		got, err := l.LastDecision()
		if err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("decision %+v, want %+v", got, c.want)
		}
	}
}

// TestHeavySourceAmongSpoofed: one source flooding at 10x its limit hidden
// among a million one-packet spoofed sources (a thousand times the table's
// capacity), plus
// legitimate low-rate sources. The heavy source stays limited within 5% (it
// is never evicted into a fresh bucket), the table never exceeds its
// capacity, and no legitimate packet is dropped.
func TestHeavySourceAmongSpoofed(t *testing.T) {
	const capacity = 1024
	l := loadWith(t, maps.Options{Clock: maps.ClockMap, MaxSources: capacity}, `
rules:
  - name: r
    limit: {algorithm: token_bucket, rate: 1000/s, burst: 50}
`)
	pinCPU(t, 0) // the sketch is per CPU
	heavy := udp4("192.0.2.1").bytes(t)
	legit := make([][]byte, 10)
	for i := range legit {
		legit[i] = udp4(fmt.Sprintf("198.18.1.%d", i+1)).bytes(t)
	}
	r := rand.New(rand.NewPCG(1, 2))
	const (
		step     = 100 * time.Microsecond // heavy: 10k/s, 10x its limit
		duration = 2 * time.Second
	)
	spoofPerStep := 50
	if os.Getenv("XDPLIMIT_VM") != "" {
		spoofPerStep = 5
	}
	var heavyPass, legitDrop, spoofed int
	for now := t0; now < t0+duration; now += step {
		if run(t, l, heavy, now) == xdpPass {
			heavyPass++
		}
		// A million one-packet sources over the run (100k under
		// emulation), at least 100x the table's capacity.
		for k := 0; k < spoofPerStep; k++ {
			a := r.Uint32()
			f := udp4(netip.AddrFrom4([4]byte{byte(a>>24) | 1, byte(a >> 16), byte(a >> 8), byte(a)}).String())
			run(t, l, f.bytes(t), now)
			spoofed++
		}
		// Legitimate sources: 100/s each, well within their limit.
		if (now-t0)%(10*time.Millisecond) == 0 {
			for _, p := range legit {
				if run(t, l, p, now) != xdpPass {
					legitDrop++
				}
			}
		}
	}
	want := 50 + 1000*duration.Seconds()
	t.Logf("heavy passed %d (expected %.0f), %d spoofed sources, legit drops %d", heavyPass, want, spoofed, legitDrop)
	if spoofed < 10*capacity {
		t.Fatalf("only %d spoofed sources", spoofed)
	}
	if r := float64(heavyPass) / want; r < 0.95 || r > 1.05 {
		t.Errorf("heavy source admitted %d, want %.0f within 5%%", heavyPass, want)
	}
	if legitDrop != 0 {
		t.Errorf("%d legitimate packets dropped", legitDrop)
	}
	n, err := l.TrackedSources()
	if err != nil {
		t.Fatal(err)
	}
	cs, _ := l.Counters()
	t.Logf("table holds %d of %d; %d inserts, %d admitted untracked, %d insert failures", n, capacity,
		cs[maps.CounterNewSource].Packets, cs[maps.CounterUntracked].Packets, cs[maps.CounterInsertFail].Packets)
	if n > capacity {
		t.Errorf("the table holds %d entries, its capacity is %d", n, capacity)
	}
}
