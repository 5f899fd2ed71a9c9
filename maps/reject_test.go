// SPDX-License-Identifier: Apache-2.0

package maps_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

// Rejects through the real program (bpf/reject.h): which refused packets
// are answered, what the answer says, and the budgets that bound them.

// rejectPolicy refuses every source's packets after its first (the bucket
// refills once a minute) and answers them.
const rejectPolicy = `
rules:
  - name: all
    limit: {algorithm: token_bucket, rate: 1/m, burst: 1}
    action: reject
`

// rejected runs frame at now twice: the first is admitted, the second
// refused; it returns the second's verdict and the frame as the program
// left it.
func rejected(t *testing.T, l *maps.Limiter, frame []byte, now time.Duration) (uint32, []byte) {
	t.Helper()
	if v, _ := runOut(t, l, frame, now); v != xdpPass {
		t.Fatalf("first packet: verdict %d, want XDP_PASS", v)
	}
	return runOut(t, l, frame, now)
}

// mustAnswer is rejected for a packet that must be answered: it returns
// the answer, decoded and its checksums checked, after checking that it is
// no longer than the packet and goes back where the packet came from.
func mustAnswer(t *testing.T, l *maps.Limiter, f pktgen.Frame, now time.Duration) gopacket.Packet {
	t.Helper()
	in := f.MustBuild()
	v, out := rejected(t, l, in, now)
	if v != xdpTX {
		t.Fatalf("refused packet: verdict %d, want XDP_TX", v)
	}
	pkt := answer(t, out)
	if ipLen(t, pkt) > ipLen(t, gopacket.NewPacket(in, layers.LayerTypeEthernet, gopacket.Default)) {
		t.Errorf("the answer's IP packet (%d bytes) is longer than the packet's (%d)", ipLen(t, pkt),
			ipLen(t, gopacket.NewPacket(in, layers.LayerTypeEthernet, gopacket.Default)))
	}
	eth := pkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	if !bytes.Equal(eth.SrcMAC, pktgen.DefaultDstMAC) || !bytes.Equal(eth.DstMAC, pktgen.DefaultSrcMAC) {
		t.Errorf("MACs %s -> %s: not the packet's swapped", eth.SrcMAC, eth.DstMAC)
	}
	src, dst := addrs(pkt)
	if src != f.Dst || dst != f.Src {
		t.Errorf("answer %v -> %v, want %v -> %v", src, dst, f.Dst, f.Src)
	}
	return pkt
}

// ipLen is the length of a frame's IP packet.
func ipLen(t *testing.T, pkt gopacket.Packet) int {
	t.Helper()
	switch ip := pkt.NetworkLayer().(type) {
	case *layers.IPv4:
		return int(ip.Length)
	case *layers.IPv6:
		return 40 + int(ip.Length)
	}
	t.Fatal("no IP layer")
	return 0
}

func addrs(pkt gopacket.Packet) (src, dst netip.Addr) {
	s, _ := netip.AddrFromSlice(pkt.NetworkLayer().NetworkFlow().Src().Raw())
	d, _ := netip.AddrFromSlice(pkt.NetworkLayer().NetworkFlow().Dst().Raw())
	return s, d
}

func tcpOf(t *testing.T, pkt gopacket.Packet) *layers.TCP {
	t.Helper()
	tcp, ok := pkt.Layer(layers.LayerTypeTCP).(*layers.TCP)
	if !ok {
		t.Fatalf("no TCP layer in %v", pkt)
	}
	return tcp
}

// TestRejectReset: a TCP segment gets a reset, as RFC 9293 3.10.7.1 says:
// without ACK, an acknowledgment of what the segment occupied (its data,
// SYN and FIN) and sequence number 0; with ACK, the segment's
// acknowledgment as sequence number.
func TestRejectReset(t *testing.T) {
	syn := pktgen.Frame{Src: netip.MustParseAddr("192.0.2.7"), Dst: netip.MustParseAddr("198.51.100.1"),
		Proto: pktgen.ProtoTCP, SrcPort: 40000, DstPort: 8080, TCPSeq: 1000,
		TCPOptions: []pktgen.TCPOption{pktgen.OptMSS(1460), pktgen.OptSACK()}}
	for _, c := range []struct {
		name          string
		frame         pktgen.Frame
		ack           bool // the reset's ACK flag
		seq, acks     uint32
		wantTTLOrHops uint8
	}{
		{"SYN", syn, true, 0, 1001, 64},
		{"SYN with data", with(syn, func(f *pktgen.Frame) { f.Payload = 10 }), true, 0, 1011, 64},
		{"IPv6 SYN", with(syn, func(f *pktgen.Frame) {
			f.Src, f.Dst = netip.MustParseAddr("2001:db8::7"), netip.MustParseAddr("2001:db8::1")
		}), true, 0, 1001, 64},
		{"FIN with data, no ACK", with(syn, func(f *pktgen.Frame) { f.TCPFlags, f.Payload = pktgen.TCPFin, 5 }),
			true, 0, 1006, 64},
		{"null scan", with(syn, func(f *pktgen.Frame) { f.NoTCPFlags, f.TCPOptions = true, nil }), true, 0, 1000, 64},
		{"data with ACK", with(syn, func(f *pktgen.Frame) {
			f.TCPFlags, f.TCPAck, f.Payload = pktgen.TCPAck|pktgen.TCPPsh, 77777, 100
		}), false, 77777, 0, 64},
		{"SYN-ACK", with(syn, func(f *pktgen.Frame) { f.TCPFlags, f.TCPAck = pktgen.TCPSyn|pktgen.TCPAck, 5 }),
			false, 5, 0, 64},
		{"two VLAN tags", with(syn, func(f *pktgen.Frame) {
			f.VLANs = []pktgen.VLAN{{TPID: 0x88a8, ID: 100}, {ID: 42}}
		}), true, 0, 1001, 64},
		{"IPv4 options", with(syn, func(f *pktgen.Frame) { f.IPv4Options = 3 }), true, 0, 1001, 64},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := load(t, maps.ClockMap, rejectPolicy)
			pkt := mustAnswer(t, l, c.frame, t0)
			tcp := tcpOf(t, pkt)
			if tcp.SrcPort != 8080 || tcp.DstPort != 40000 || !tcp.RST || tcp.ACK != c.ack || tcp.SYN || tcp.FIN ||
				tcp.PSH || tcp.Seq != c.seq || tcp.Ack != c.acks || tcp.Window != 0 || len(tcp.Options) != 0 ||
				len(tcp.Payload) != 0 {
				t.Errorf("reset %d -> %d RST %v ACK %v SYN %v FIN %v seq %d ack %d window %d, %d options, %d bytes; "+
					"want 8080 -> 40000 RST, ACK %v, seq %d ack %d, window 0, nothing else",
					tcp.SrcPort, tcp.DstPort, tcp.RST, tcp.ACK, tcp.SYN, tcp.FIN, tcp.Seq, tcp.Ack, tcp.Window,
					len(tcp.Options), len(tcp.Payload), c.ack, c.seq, c.acks)
			}
			if len(c.frame.VLANs) > 0 {
				var ids []uint16
				for _, ly := range pkt.Layers() {
					if d, ok := ly.(*layers.Dot1Q); ok {
						ids = append(ids, d.VLANIdentifier)
					}
				}
				if fmt.Sprint(ids) != "[100 42]" {
					t.Errorf("VLAN tags %v, want [100 42]", ids)
				}
			}
			stats, err := l.RuleStats()
			if err != nil {
				t.Fatal(err)
			}
			if v := stats[0].Verdicts; v[maps.VerdictReject].Packets != 1 || v[maps.VerdictDrop].Packets != 0 ||
				stats[0].RejectSuppressed != 0 || !stats[0].Reject {
				t.Errorf("verdicts reject %d, drop %d, suppressed %d", v[maps.VerdictReject].Packets,
					v[maps.VerdictDrop].Packets, stats[0].RejectSuppressed)
			}
		})
	}
}

// icmpError is the ICMP error an answer carries: type, code, and the
// quoted packet.
func icmpError(t *testing.T, pkt gopacket.Packet) (typ, code uint8, quote []byte) {
	t.Helper()
	l4 := pkt.NetworkLayer().LayerPayload()
	if len(l4) < 8 || binary.BigEndian.Uint32(l4[4:]) != 0 {
		t.Fatalf("ICMP error % x: 8 bytes of header, the last 4 unused", l4)
	}
	return l4[0], l4[1], l4[8:]
}

// TestRejectUnreachable: any other packet gets an ICMP destination
// unreachable, administratively prohibited, quoting the packet from its IP
// header on: all of it when that fits the packet's own length less the
// error's headers (never longer than the packet), at most what fits in 576
// (IPv4) or 1280 bytes (IPv6), in whole words.
func TestRejectUnreachable(t *testing.T) {
	udp := pktgen.Frame{Src: netip.MustParseAddr("192.0.2.7"), Dst: netip.MustParseAddr("198.51.100.1"),
		SrcPort: 40000, DstPort: 53, Payload: 100}
	udp6 := with(udp, func(f *pktgen.Frame) {
		f.Src, f.Dst = netip.MustParseAddr("2001:db8::7"), netip.MustParseAddr("2001:db8::1")
	})
	for _, c := range []struct {
		name       string
		frame      pktgen.Frame
		typ, code  uint8
		quote      int // bytes quoted
		proto      layers.IPProtocol
		tos, ttlOr uint8
	}{
		// 128 bytes of IP packet, less 28 of headers: 100.
		{"UDP", udp, 3, 13, 100, layers.IPProtocolICMPv4, 0xc0, 64},
		// 33 bytes left over: whole words, 32.
		{"UDP, odd length", with(udp, func(f *pktgen.Frame) { f.Payload = 33 }), 3, 13, 32, layers.IPProtocolICMPv4, 0xc0, 64},
		{"UDP, long", with(udp, func(f *pktgen.Frame) { f.Payload = 1400 }), 3, 13, 548, layers.IPProtocolICMPv4, 0xc0, 64},
		{"ping", with(udp, func(f *pktgen.Frame) { f.Proto, f.Payload = pktgen.ProtoICMP, 56 }), 3, 13, 56, layers.IPProtocolICMPv4, 0xc0, 64},
		{"IPv4 options", with(udp, func(f *pktgen.Frame) { f.IPv4Options = 10 }), 3, 13, 140, layers.IPProtocolICMPv4, 0xc0, 64},
		{"first fragment", with(udp, func(f *pktgen.Frame) { f.Frag = &pktgen.Fragment{More: true, ID: 7} }),
			3, 13, 100, layers.IPProtocolICMPv4, 0xc0, 64},
		// 148 bytes of IP packet, less 48 of headers.
		{"IPv6 UDP", udp6, 1, 1, 100, layers.IPProtocolICMPv6, 0, 64},
		{"IPv6 UDP, long", with(udp6, func(f *pktgen.Frame) { f.Payload = 1400 }), 1, 1, 1232, layers.IPProtocolICMPv6, 0, 64},
		{"IPv6 ping", with(udp6, func(f *pktgen.Frame) { f.Proto, f.Payload = pktgen.ProtoICMP, 56 }), 1, 1, 56, layers.IPProtocolICMPv6, 0, 64},
		{"IPv6 extension header", with(udp6, func(f *pktgen.Frame) { f.Ext = []pktgen.ExtHeader{pktgen.ExtDestOpts} }),
			1, 1, 108, layers.IPProtocolICMPv6, 0, 64},
		{"QinQ", with(udp, func(f *pktgen.Frame) { f.VLANs = []pktgen.VLAN{{TPID: 0x88a8, ID: 100}, {ID: 42}} }),
			3, 13, 100, layers.IPProtocolICMPv4, 0xc0, 64},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := load(t, maps.ClockMap, rejectPolicy)
			pkt := mustAnswer(t, l, c.frame, t0)
			switch ip := pkt.NetworkLayer().(type) {
			case *layers.IPv4:
				if ip.Protocol != c.proto || ip.TOS != c.tos || ip.TTL != c.ttlOr || ip.IHL != 5 || ip.Flags != layers.IPv4DontFragment {
					t.Errorf("IPv4 protocol %v, TOS %#x, TTL %d, IHL %d, flags %v", ip.Protocol, ip.TOS, ip.TTL, ip.IHL, ip.Flags)
				}
			case *layers.IPv6:
				if ip.NextHeader != c.proto || ip.HopLimit != c.ttlOr || ip.TrafficClass != c.tos {
					t.Errorf("IPv6 next header %v, hop limit %d, class %d", ip.NextHeader, ip.HopLimit, ip.TrafficClass)
				}
			}
			typ, code, quote := icmpError(t, pkt)
			if typ != c.typ || code != c.code || len(quote) != c.quote {
				t.Errorf("ICMP type %d code %d quoting %d bytes, want %d/%d quoting %d", typ, code, len(quote), c.typ, c.code, c.quote)
			}
			in := gopacket.NewPacket(c.frame.MustBuild(), layers.LayerTypeEthernet, gopacket.Default)
			sent := append(in.NetworkLayer().LayerContents(), in.NetworkLayer().LayerPayload()...)
			if len(quote) > len(sent) || !bytes.Equal(quote, sent[:len(quote)]) {
				t.Errorf("quote\n% x\nis not the start of the packet's IP packet\n% x", quote, sent)
			}
		})
	}
}

// TestRejectNever: packets an answer would make the limiter an amplifier,
// a reflector or a storm are dropped unanswered, and so are packets too
// short to quote or in a shape the answer does not follow; counted by why.
func TestRejectNever(t *testing.T) {
	udp := pktgen.Frame{Src: netip.MustParseAddr("192.0.2.7"), Dst: netip.MustParseAddr("198.51.100.1"),
		SrcPort: 40000, DstPort: 53, Payload: 100}
	udp6 := with(udp, func(f *pktgen.Frame) {
		f.Src, f.Dst = netip.MustParseAddr("2001:db8::7"), netip.MustParseAddr("2001:db8::1")
	})
	tcp := with(udp, func(f *pktgen.Frame) { f.Proto, f.Payload = pktgen.ProtoTCP, 0 })
	from := func(f pktgen.Frame, src string) pktgen.Frame {
		return with(f, func(f *pktgen.Frame) { f.Src = netip.MustParseAddr(src) })
	}
	to := func(f pktgen.Frame, dst string) pktgen.Frame {
		return with(f, func(f *pktgen.Frame) { f.Dst = netip.MustParseAddr(dst) })
	}
	icmp := func(f pktgen.Frame, typ, code uint8) pktgen.Frame {
		return with(f, func(f *pktgen.Frame) { f.Proto, f.ICMP = pktgen.ProtoICMP, &pktgen.ICMPMessage{Type: typ, Code: code} })
	}
	for _, c := range []struct {
		name  string
		frame pktgen.Frame
		why   maps.Counter
	}{
		{"from 0.0.0.0", from(udp, "0.0.0.0"), maps.CounterRejectNever},
		{"from 0.1.2.3", from(udp, "0.1.2.3"), maps.CounterRejectNever},
		{"from loopback", from(udp, "127.0.0.1"), maps.CounterRejectNever},
		{"from multicast", from(udp, "224.0.0.251"), maps.CounterRejectNever},
		{"from class E", from(udp, "240.0.0.1"), maps.CounterRejectNever},
		{"from the broadcast", from(udp, "255.255.255.255"), maps.CounterRejectNever},
		{"to multicast", to(udp, "239.1.2.3"), maps.CounterRejectNever},
		{"to the broadcast", to(udp, "255.255.255.255"), maps.CounterRejectNever},
		{"TCP to multicast", to(tcp, "224.0.0.1"), maps.CounterRejectNever},
		{"link-layer broadcast", with(udp, func(f *pktgen.Frame) {
			f.DstMAC = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
		}), maps.CounterRejectNever},
		{"link-layer multicast", with(udp, func(f *pktgen.Frame) {
			f.DstMAC = net.HardwareAddr{0x01, 0x00, 0x5e, 0, 0, 1}
		}), maps.CounterRejectNever},
		{"from ::", from(udp6, "::"), maps.CounterRejectNever},
		{"from ::1", from(udp6, "::1"), maps.CounterRejectNever},
		{"from IPv6 multicast", from(udp6, "ff02::1"), maps.CounterRejectNever},
		{"to IPv6 multicast", to(udp6, "ff05::2"), maps.CounterRejectNever},
		{"a reset", with(tcp, func(f *pktgen.Frame) { f.TCPFlags = pktgen.TCPRst }), maps.CounterRejectNever},
		{"a reset with ACK", with(tcp, func(f *pktgen.Frame) { f.TCPFlags = pktgen.TCPRst | pktgen.TCPAck }), maps.CounterRejectNever},
		{"an ICMP error", icmp(udp, 3, 3), maps.CounterRejectNever},
		{"an ICMP time exceeded", icmp(udp, 11, 0), maps.CounterRejectNever},
		{"an ICMP type Linux does not know", icmp(udp, 42, 0), maps.CounterRejectNever},
		{"an ICMPv6 error", icmp(udp6, 1, 4), maps.CounterRejectNever},
		{"an ICMPv6 packet too big", icmp(udp6, 2, 0), maps.CounterRejectNever},
		{"a non-first fragment", nonFirst(udp, 10), maps.CounterRejectNever},
		{"an IPv6 non-first fragment", nonFirst(udp6, 10), maps.CounterRejectNever},

		// 28 bytes of IP packet cannot quote 28 plus 28 of headers.
		{"UDP too short to quote", with(udp, func(f *pktgen.Frame) { f.Payload = 27 }), maps.CounterRejectUnanswered},
		{"IPv6 UDP too short to quote", with(udp6, func(f *pktgen.Frame) { f.Payload = 47 }), maps.CounterRejectUnanswered},
		{"TCP first fragment", with(tcp, func(f *pktgen.Frame) { f.Frag = &pktgen.Fragment{More: true, ID: 7} }),
			maps.CounterRejectUnanswered},
		{"TCP behind an IPv6 extension header", with(tcp, func(f *pktgen.Frame) {
			f.Src, f.Dst = netip.MustParseAddr("2001:db8::7"), netip.MustParseAddr("2001:db8::1")
			f.Ext = []pktgen.ExtHeader{pktgen.ExtDestOpts}
		}), maps.CounterRejectUnanswered},
		{"five VLAN tags", with(udp, func(f *pktgen.Frame) {
			f.VLANs = []pktgen.VLAN{{ID: 1}, {ID: 2}, {ID: 3}, {ID: 4}, {ID: 5}}
		}), maps.CounterRejectUnanswered},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := load(t, maps.ClockMap, rejectPolicy)
			in := c.frame.MustBuild()
			if v, _ := rejected(t, l, in, t0); v != xdpDrop {
				t.Fatalf("refused packet: verdict %d, want XDP_DROP", v)
			}
			if n := counter(t, l, c.why); n != 1 {
				t.Errorf("%v: %d, want 1", c.why, n)
			}
			stats, err := l.RuleStats()
			if err != nil {
				t.Fatal(err)
			}
			if v := stats[0].Verdicts; v[maps.VerdictDrop].Packets != 1 || v[maps.VerdictReject].Packets != 0 ||
				stats[0].RejectSuppressed != 1 {
				t.Errorf("verdicts drop %d, reject %d, suppressed %d; want 1, 0, 1", v[maps.VerdictDrop].Packets,
					v[maps.VerdictReject].Packets, stats[0].RejectSuppressed)
			}
		})
	}
}

// TestRejectBudgets: one answer a second per source, and the global
// budget over all of them; a source refused for the budget's sake keeps
// its second.
func TestRejectBudgets(t *testing.T) {
	l := load(t, maps.ClockMap, rejectPolicy+`
reject: {budget: 10/s, burst: 2}
`)
	src := func(i int) []byte {
		return pktgen.Frame{Src: netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}), Dst: netip.MustParseAddr("198.51.100.1"),
			Proto: pktgen.ProtoTCP, SrcPort: 40000, DstPort: 80}.MustBuild()
	}
	step := func(at time.Duration, i int, want uint32) {
		t.Helper()
		if v, _ := runOut(t, l, src(i), at); v != want {
			t.Fatalf("source %d at +%v: verdict %d, want %d", i, at-t0, v, want)
		}
	}
	for i := 1; i <= 4; i++ {
		step(t0, i, xdpPass) // each source's first packet is admitted
	}
	// The burst of 2 answers; then the budget is spent.
	step(t0, 1, xdpTX)
	step(t0, 2, xdpTX)
	step(t0, 3, xdpDrop)
	// A tenth of a second later the budget holds one more answer, but
	// source 1 had one within the second; source 3 still has its own.
	step(t0+100*time.Millisecond, 1, xdpDrop)
	step(t0+100*time.Millisecond, 3, xdpTX)
	step(t0+100*time.Millisecond, 4, xdpDrop)
	// A second after its answer, source 1 gets another.
	step(t0+1100*time.Millisecond, 1, xdpTX)
	for c, want := range map[maps.Counter]uint64{maps.CounterRejectBudget: 2, maps.CounterRejectSource: 1} {
		if n := counter(t, l, c); n != want {
			t.Errorf("%v: %d, want %d", c, n, want)
		}
	}
}

// TestRejectShadow: a reject rule in shadow answers nothing.
func TestRejectShadow(t *testing.T) {
	l := load(t, maps.ClockMap, "mode: shadow\n"+rejectPolicy)
	if v, _ := rejected(t, l, udp4("192.0.2.7").MustBuild(), t0); v != xdpPass {
		t.Fatalf("verdict %d, want XDP_PASS", v)
	}
	stats, err := l.RuleStats()
	if err != nil {
		t.Fatal(err)
	}
	if v := stats[0].Verdicts; v[maps.VerdictShadow].Packets != 1 || v[maps.VerdictReject].Packets != 0 {
		t.Errorf("verdicts shadow %d, reject %d", v[maps.VerdictShadow].Packets, v[maps.VerdictReject].Packets)
	}
}

// TestRejectFlowCache: a flow the flow cache refuses is answered as its
// rule would answer it.
func TestRejectFlowCache(t *testing.T) {
	// The flow cache is per CPU: every run on one CPU, or a migration
	// between runs leaves it cold.
	testutil.PinCPU(t, 0)
	l := load(t, maps.ClockMap, rejectPolicy)
	in := tcp4("192.0.2.7").MustBuild()
	var got []uint32
	for i, at := range []time.Duration{t0, t0, t0, t0, t0 + 1500*time.Millisecond, t0 + 1500*time.Millisecond} {
		v, _ := runOut(t, l, in, at)
		if i == 0 && v != xdpPass {
			t.Fatalf("first packet: verdict %d", v)
		}
		got = append(got, v)
	}
	if want := []uint32{xdpPass, xdpTX, xdpDrop, xdpDrop, xdpTX, xdpDrop}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("verdicts %v, want %v", got, want)
	}
	if n := counter(t, l, maps.CounterFlowCached); n == 0 {
		t.Error("no refusal came from the flow cache")
	}
}
