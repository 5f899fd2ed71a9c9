// SPDX-License-Identifier: Apache-2.0

package maps_test

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

// The reflection guard through both real programs: the egress program
// records the requests this host sends (run on the frames as they would
// leave), the XDP program passes a reflector's datagram only as the
// answer to one of them.

// dnsFrame is an IPv4 UDP datagram whose payload starts with a DNS ID. Its
// UDP checksum is 0 (none), which IPv4 allows, as the ID is patched in.
func dnsFrame(src, dst string, sport, dport, id uint16) pktgen.Frame {
	return pktgen.Frame{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst), Proto: pktgen.ProtoUDP,
		SrcPort: sport, DstPort: dport, Payload: 12, TCPSeq: uint32(id)}
}

func buildDNS(f pktgen.Frame) []byte {
	b := f.MustBuild()
	if f.Src.Is4() {
		binary.BigEndian.PutUint16(b[14+20+6:], 0)
		binary.BigEndian.PutUint16(b[14+20+8:], uint16(f.TCPSeq))
	}
	return b
}

func TestReflectionGuard(t *testing.T) {
	l := load(t, maps.ClockMap, "conversations: {reflection: {when: always, ports: [53, 123, 11211], window: 10s}}\nrules: []\n")
	if err := l.SetLocal([]netip.Prefix{netip.MustParsePrefix("198.51.100.1/32"), netip.MustParsePrefix("2001:db8::1/128")}); err != nil {
		t.Fatal(err)
	}
	eg, err := l.EgressProgram()
	if err != nil {
		t.Fatal(err)
	}
	send := func(f pktgen.Frame, at time.Duration) {
		t.Helper()
		if err := l.SetClock(uint64(at)); err != nil {
			t.Fatal(err)
		}
		ret, err := eg.Run(&ebpf.RunOptions{Data: buildDNS(f), Repeat: 1})
		if err != nil || ret != 0 {
			t.Fatalf("egress program: %d, %v; want TC_ACT_OK", ret, err)
		}
	}
	judge := func(f pktgen.Frame, at time.Duration) uint32 {
		t.Helper()
		v, _ := runOut(t, l, buildDNS(f), at)
		return v
	}
	host := "198.51.100.1"
	send(dnsFrame(host, "192.0.2.53", 40000, 53, 0x1234), t0)
	send(pktgen.Frame{Src: netip.MustParseAddr("2001:db8::1"), Dst: netip.MustParseAddr("2001:db8:1::123"),
		Proto: pktgen.ProtoUDP, SrcPort: 40001, DstPort: 123, Payload: 48}, t0)
	send(dnsFrame(host, "192.0.2.9", 40002, 9999, 0), t0) // not a reflector port: not recorded
	if n := counter(t, l, maps.CounterRequests); n != 2 {
		t.Errorf("%d requests recorded, want 2", n)
	}
	ntpAnswer := pktgen.Frame{Src: netip.MustParseAddr("2001:db8:1::123"), Dst: netip.MustParseAddr("2001:db8::1"),
		Proto: pktgen.ProtoUDP, SrcPort: 123, DstPort: 40001, Payload: 48}
	cases := []struct {
		name string
		f    pktgen.Frame
		at   time.Duration
		want uint32
	}{
		{"the DNS answer", dnsFrame("192.0.2.53", host, 53, 40000, 0x1234), t0 + time.Second, xdpPass},
		{"a DNS answer with another ID", dnsFrame("192.0.2.53", host, 53, 40000, 0x4321), t0 + time.Second, xdpDrop},
		{"a DNS answer from another server", dnsFrame("192.0.2.54", host, 53, 40000, 0x1234), t0 + time.Second, xdpDrop},
		{"a DNS answer to another port", dnsFrame("192.0.2.53", host, 53, 40009, 0x1234), t0 + time.Second, xdpDrop},
		{"the NTP answer (IPv6)", ntpAnswer, t0 + time.Second, xdpPass},
		{"a memcached flood never asked for", dnsFrame("192.0.2.11", host, 11211, 80, 0), t0, xdpDrop},
		{"a server's exchange, 53 to 53", dnsFrame("192.0.2.53", host, 53, 53, 7), t0, xdpPass},
		{"from a port not a reflector's", dnsFrame("192.0.2.53", host, 5353, 40000, 0x1234), t0, xdpPass},
		{"to an address not this host's", dnsFrame("192.0.2.53", "203.0.113.1", 53, 40000, 1), t0, xdpPass},
		{"the DNS answer after the window", dnsFrame("192.0.2.53", host, 53, 40000, 0x1234), t0 + 11*time.Second, xdpDrop},
		{"the NTP answer after the window", ntpAnswer, t0 + 11*time.Second, xdpDrop},
	}
	drops := uint64(0)
	for _, c := range cases {
		if v := judge(c.f, c.at); v != c.want {
			t.Errorf("%s: verdict %d, want %d", c.name, v, c.want)
		}
		if c.want == xdpDrop {
			drops++
		}
	}
	if n := counter(t, l, maps.CounterNoRequest); n != drops {
		t.Errorf("no_request counted %d, want %d", n, drops)
	}
}

// TestReflectionGuardOff: with the guard off the egress program records
// nothing, and a reflector's datagram passes.
func TestReflectionGuardOff(t *testing.T) {
	l := load(t, maps.ClockMap, "conversations: {udp: always}\nrules: []\n")
	if err := l.SetLocal([]netip.Prefix{netip.MustParsePrefix("198.51.100.1/32")}); err != nil {
		t.Fatal(err)
	}
	eg, err := l.EgressProgram()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eg.Run(&ebpf.RunOptions{Data: buildDNS(dnsFrame("198.51.100.1", "192.0.2.53", 40000, 53, 1)), Repeat: 1}); err != nil {
		t.Fatal(err)
	}
	if n := counter(t, l, maps.CounterRequests); n != 0 {
		t.Errorf("%d requests recorded with the guard off", n)
	}
}

// TestReflectionGuardEcho: an echo reply passes only for an echo request
// this host sent, with its identifier; with echo_replies off, any passes.
func TestReflectionGuardEcho(t *testing.T) {
	icmp := func(src, dst string, typ uint8, id uint16) pktgen.Frame {
		return pktgen.Frame{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst), Proto: pktgen.ProtoICMP,
			ICMP: &pktgen.ICMPMessage{Type: typ}, SrcPort: id, Payload: 16}
	}
	for _, c := range []struct {
		name, policy string
		judged       bool
	}{
		{"on", "conversations: {reflection: always}\nrules: []\n", true},
		{"echo_replies off", "conversations: {reflection: {when: always, echo_replies: false}}\nrules: []\n", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := load(t, maps.ClockMap, c.policy)
			if err := l.SetLocal([]netip.Prefix{netip.MustParsePrefix("198.51.100.1/32"), netip.MustParsePrefix("2001:db8::1/128")}); err != nil {
				t.Fatal(err)
			}
			eg, err := l.EgressProgram()
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range []pktgen.Frame{icmp("198.51.100.1", "192.0.2.9", 8, 0x77), icmp("2001:db8::1", "2001:db8:9::9", 128, 0x78)} {
				if _, err := eg.Run(&ebpf.RunOptions{Data: f.MustBuild(), Repeat: 1}); err != nil {
					t.Fatal(err)
				}
			}
			drop := uint32(xdpPass)
			if c.judged {
				drop = xdpDrop
			}
			for _, k := range []struct {
				name string
				f    pktgen.Frame
				want uint32
			}{
				{"the reply", icmp("192.0.2.9", "198.51.100.1", 0, 0x77), xdpPass},
				{"the IPv6 reply", icmp("2001:db8:9::9", "2001:db8::1", 129, 0x78), xdpPass},
				{"a reply with another identifier", icmp("192.0.2.9", "198.51.100.1", 0, 0x99), drop},
				{"a reply from another address", icmp("192.0.2.10", "198.51.100.1", 0, 0x77), drop},
				{"an IPv6 reply never asked for", icmp("2001:db8:9::10", "2001:db8::1", 129, 0x78), drop},
				{"an echo request", icmp("192.0.2.10", "198.51.100.1", 8, 0x77), xdpPass},
			} {
				if v, _ := runOut(t, l, k.f.MustBuild(), t0); v != k.want {
					t.Errorf("%s: verdict %d, want %d", k.name, v, k.want)
				}
			}
		})
	}
}
