// SPDX-License-Identifier: Apache-2.0

package maps_test

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

// SYN cookies through the real program (bpf/syncookie.h): which SYNs are
// answered, and what the SYN-ACK says. The cookies themselves are the
// kernel's; syncookie_ack_test.go checks that ACKs carrying them back pass.

// cookiePolicy refuses every SYN to port 8080 after a source's first (the
// bucket refills once a minute, so the test's refusals stay refusals).
const cookiePolicy = `
rules:
  - name: syn
    match: {protocol: tcp, dst_ports: [8080], tcp_flags: [syn]}
    limit: {algorithm: token_bucket, rate: 1/m, burst: 1}
    action: syncookie
`

// A SYN as Linux sends one: MSS, SACK permitted, timestamps, window scale.
func cookieSYN(src, dst string) pktgen.Frame {
	return pktgen.Frame{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst), Proto: pktgen.ProtoTCP,
		SrcPort: 40000, DstPort: 8080, TCPSeq: 1000,
		TCPOptions: []pktgen.TCPOption{pktgen.OptMSS(1460), pktgen.OptSACK(), pktgen.OptTimestamps(12345, 0),
			pktgen.OptNOP(), pktgen.OptWScale(9)}}
}

// runOut runs the program on frame at injected time now, and returns its
// verdict and the frame as the program left it.
func runOut(t *testing.T, l *maps.Limiter, frame []byte, now time.Duration) (uint32, []byte) {
	t.Helper()
	if err := l.SetClock(uint64(now)); err != nil {
		t.Fatal(err)
	}
	out := make([]byte, len(frame)+256)
	opts := &ebpf.RunOptions{Data: frame, DataOut: out, Repeat: 1}
	ret, err := l.Program().Run(opts)
	if err != nil {
		t.Fatalf("test run: %v", err)
	}
	return ret, opts.DataOut
}

// answered sends the SYN until the program answers it: the first is
// admitted, the second passed to keep the stack's listeners accepting
// cookie ACKs (the first refused SYN to a destination in a second), the
// third answered. It returns the SYN-ACK.
func answered(t *testing.T, l *maps.Limiter, syn []byte, now time.Duration) []byte {
	t.Helper()
	for i := 0; i < 3; i++ {
		v, out := runOut(t, l, syn, now)
		if i < 2 && v != xdpPass {
			t.Fatalf("SYN %d: verdict %d, want XDP_PASS", i+1, v)
		}
		if i == 2 {
			if v != xdpTX {
				t.Fatalf("SYN 3: verdict %d, want XDP_TX", v)
			}
			return out
		}
	}
	return nil
}

// synAck decodes a SYN-ACK the program built, checking every checksum.
func synAck(t *testing.T, frame []byte) (gopacket.Packet, *layers.TCP) {
	t.Helper()
	pkt := answer(t, frame)
	tcp, ok := pkt.Layer(layers.LayerTypeTCP).(*layers.TCP)
	if !ok {
		t.Fatalf("no TCP layer in % x", frame)
	}
	if len(tcp.Payload) != 0 {
		t.Errorf("SYN-ACK carries %d bytes of payload", len(tcp.Payload))
	}
	return pkt, tcp
}

// tcpOpts is what a segment's options say.
type tcpOpts struct {
	mss            uint16
	sack, ts, ws   bool
	wscale         uint8
	tsval, tsecr   uint32
	kinds          []layers.TCPOptionKind
	sackBeforeTime bool
}

func optionsOf(tcp *layers.TCP) tcpOpts {
	var o tcpOpts
	for _, op := range tcp.Options {
		o.kinds = append(o.kinds, op.OptionType)
		switch op.OptionType {
		case layers.TCPOptionKindMSS:
			o.mss = binary.BigEndian.Uint16(op.OptionData)
		case layers.TCPOptionKindSACKPermitted:
			o.sack = true
		case layers.TCPOptionKindTimestamps:
			o.ts = true
			o.tsval = binary.BigEndian.Uint32(op.OptionData)
			o.tsecr = binary.BigEndian.Uint32(op.OptionData[4:])
		case layers.TCPOptionKindWindowScale:
			o.ws, o.wscale = true, op.OptionData[0]
		}
	}
	return o
}

func TestSynCookieAnswer(t *testing.T) {
	l := load(t, maps.ClockMap, cookiePolicy)
	syn := cookieSYN("192.0.2.7", "198.51.100.1")
	in := syn.MustBuild()
	pkt, tcp := synAck(t, answered(t, l, in, t0))

	eth := pkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	if eth.SrcMAC.String() != pktgen.DefaultDstMAC.String() || eth.DstMAC.String() != pktgen.DefaultSrcMAC.String() {
		t.Errorf("MACs %s -> %s: not the SYN's swapped", eth.SrcMAC, eth.DstMAC)
	}
	ip := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	if ip.SrcIP.String() != "198.51.100.1" || ip.DstIP.String() != "192.0.2.7" {
		t.Errorf("addresses %s -> %s", ip.SrcIP, ip.DstIP)
	}
	if ip.TTL != maps.DefaultSynAck.TTL || ip.Flags != layers.IPv4DontFragment || ip.IHL != 5 {
		t.Errorf("IPv4 TTL %d, flags %v, IHL %d", ip.TTL, ip.Flags, ip.IHL)
	}
	if tcp.SrcPort != 8080 || tcp.DstPort != 40000 || !tcp.SYN || !tcp.ACK || tcp.FIN || tcp.RST || tcp.ECE {
		t.Errorf("TCP %d -> %d, flags SYN %v ACK %v FIN %v RST %v ECE %v", tcp.SrcPort, tcp.DstPort,
			tcp.SYN, tcp.ACK, tcp.FIN, tcp.RST, tcp.ECE)
	}
	if tcp.Ack != 1001 {
		t.Errorf("acknowledges %d, want the SYN's sequence number + 1 (1001)", tcp.Ack)
	}
	o := optionsOf(tcp)
	want := []layers.TCPOptionKind{layers.TCPOptionKindMSS, layers.TCPOptionKindSACKPermitted,
		layers.TCPOptionKindTimestamps, layers.TCPOptionKindNop, layers.TCPOptionKindWindowScale}
	if len(o.kinds) != len(want) {
		t.Fatalf("options %v, want %v", o.kinds, want)
	}
	for i := range want {
		if o.kinds[i] != want[i] {
			t.Fatalf("options %v, want %v", o.kinds, want)
		}
	}
	if o.mss != 1460 || o.wscale != maps.DefaultSynAck.WScale || o.tsecr != 12345 {
		t.Errorf("MSS %d, window scale %d, echoed timestamp %d", o.mss, o.wscale, o.tsecr)
	}
	// The timestamp's low 6 bits carry the client's window scale (9) and
	// SACK (0x10), as the kernel's cookie_init_timestamp encodes them.
	if got := o.tsval & 0x3f; got != 9|0x10 {
		t.Errorf("timestamp option bits %#x, want %#x", got, 9|0x10)
	}
	if tcp.Window != 65160 {
		t.Errorf("window %d, want 65160 (45 segments of 1448)", tcp.Window)
	}

	stats, err := l.RuleStats()
	if err != nil {
		t.Fatal(err)
	}
	if v := stats[0].Verdicts; v[maps.VerdictPass].Packets != 2 || v[maps.VerdictCookie].Packets != 1 ||
		v[maps.VerdictDrop].Packets != 0 {
		t.Errorf("rule verdicts pass %d, cookie %d, drop %d; want 2, 1, 0", v[maps.VerdictPass].Packets,
			v[maps.VerdictCookie].Packets, v[maps.VerdictDrop].Packets)
	}
	if d := stats[0].LevelDrops[0]; d != 1 {
		t.Errorf("level refusals %d, want 1 (the keepalive pass is not one)", d)
	}
	if n := counter(t, l, maps.CounterCookieKeepalive); n != 1 {
		t.Errorf("keepalive passes %d, want 1", n)
	}

	// Within the second every refused SYN to the destination is answered;
	// after it, one more reaches the stack.
	for _, at := range []time.Duration{t0, t0 + 900*time.Millisecond} {
		if v, _ := runOut(t, l, in, at); v != xdpTX {
			t.Errorf("at %v: verdict %d, want XDP_TX", at-t0, v)
		}
	}
	if v, _ := runOut(t, l, in, t0+1100*time.Millisecond); v != xdpPass {
		t.Errorf("a second later: verdict %d, want XDP_PASS (the keepalive)", v)
	}
	if v, _ := runOut(t, l, in, t0+1100*time.Millisecond); v != xdpTX {
		t.Errorf("after the keepalive: verdict %d, want XDP_TX", v)
	}
}

// TestSynCookieShapes: IPv6, VLAN tags kept as received, IPv4 options
// dropped from the answer, a SYN without options or timestamps, ECN.
func TestSynCookieShapes(t *testing.T) {
	for _, c := range []struct {
		name  string
		frame pktgen.Frame
		check func(t *testing.T, pkt gopacket.Packet, tcp *layers.TCP, o tcpOpts)
	}{
		{"IPv6", cookieSYN("2001:db8::7", "2001:db8::1"), func(t *testing.T, pkt gopacket.Packet, tcp *layers.TCP, o tcpOpts) {
			ip := pkt.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
			if ip.SrcIP.String() != "2001:db8::1" || ip.DstIP.String() != "2001:db8::7" || ip.HopLimit != 64 ||
				ip.NextHeader != layers.IPProtocolTCP {
				t.Errorf("IPv6 %s -> %s, hop limit %d, next %v", ip.SrcIP, ip.DstIP, ip.HopLimit, ip.NextHeader)
			}
			if o.mss != 1440 {
				t.Errorf("MSS %d, want 1440 (the IPv6 cap of an MTU of 1500)", o.mss)
			}
		}},
		{"one VLAN tag", with(cookieSYN("192.0.2.7", "198.51.100.1"), func(f *pktgen.Frame) {
			f.VLANs = []pktgen.VLAN{{ID: 42}}
		}), func(t *testing.T, pkt gopacket.Packet, tcp *layers.TCP, o tcpOpts) {
			if d, ok := pkt.Layer(layers.LayerTypeDot1Q).(*layers.Dot1Q); !ok || d.VLANIdentifier != 42 {
				t.Errorf("VLAN tag not kept: %v", pkt)
			}
		}},
		{"QinQ", with(cookieSYN("192.0.2.7", "198.51.100.1"), func(f *pktgen.Frame) {
			f.VLANs = []pktgen.VLAN{{TPID: 0x88a8, ID: 100}, {ID: 42}}
		}), func(t *testing.T, pkt gopacket.Packet, tcp *layers.TCP, o tcpOpts) {
			var ids []uint16
			for _, l := range pkt.Layers() {
				if d, ok := l.(*layers.Dot1Q); ok {
					ids = append(ids, d.VLANIdentifier)
				}
			}
			if len(ids) != 2 || ids[0] != 100 || ids[1] != 42 {
				t.Errorf("VLAN tags %v, want [100 42]", ids)
			}
		}},
		{"IPv4 options", with(cookieSYN("192.0.2.7", "198.51.100.1"), func(f *pktgen.Frame) { f.IPv4Options = 2 }),
			func(t *testing.T, pkt gopacket.Packet, tcp *layers.TCP, o tcpOpts) {
				if ip := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ip.IHL != 5 {
					t.Errorf("IHL %d: the answer carries no IP options", ip.IHL)
				}
			}},
		{"no options", with(cookieSYN("192.0.2.7", "198.51.100.1"), func(f *pktgen.Frame) { f.TCPOptions = nil }),
			func(t *testing.T, pkt gopacket.Packet, tcp *layers.TCP, o tcpOpts) {
				// The kernel's cookies assume 536 without an MSS option,
				// and keep nothing else without timestamps.
				if o.mss != 536 || o.sack || o.ts || o.ws || len(tcp.Contents) != 24 {
					t.Errorf("options %+v, header %d bytes; want MSS 536 alone, 24 bytes", o, len(tcp.Contents))
				}
			}},
		{"no timestamps", with(cookieSYN("192.0.2.7", "198.51.100.1"), func(f *pktgen.Frame) {
			f.TCPOptions = []pktgen.TCPOption{pktgen.OptMSS(1400), pktgen.OptSACK(), pktgen.OptNOP(), pktgen.OptWScale(7)}
		}), func(t *testing.T, pkt gopacket.Packet, tcp *layers.TCP, o tcpOpts) {
			// The cookie's table (536, 1300, 1440, 1460 for IPv4) keeps
			// the largest MSS at or below the client's.
			if o.mss != 1300 || o.sack || o.ts || o.ws {
				t.Errorf("options %+v; want MSS 1300 alone: without a timestamp a cookie keeps neither SACK nor the scale", o)
			}
		}},
		{"ECN", with(cookieSYN("192.0.2.7", "198.51.100.1"), func(f *pktgen.Frame) {
			f.TCPFlags = pktgen.TCPSyn | pktgen.TCPEce | pktgen.TCPCwr
		}), func(t *testing.T, pkt gopacket.Packet, tcp *layers.TCP, o tcpOpts) {
			if !tcp.ECE || tcp.CWR || o.tsval&0x20 == 0 {
				t.Errorf("ECE %v CWR %v, timestamp bits %#x: ECN not accepted", tcp.ECE, tcp.CWR, o.tsval&0x3f)
			}
		}},
		{"payload", with(cookieSYN("192.0.2.7", "198.51.100.1"), func(f *pktgen.Frame) { f.Payload = 100 }),
			func(t *testing.T, pkt gopacket.Packet, tcp *layers.TCP, o tcpOpts) {
				if tcp.Ack != 1001 {
					t.Errorf("acknowledges %d: a SYN's data is not acknowledged by a cookie", tcp.Ack)
				}
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := load(t, maps.ClockMap, cookiePolicy)
			pkt, tcp := synAck(t, answered(t, l, c.frame.MustBuild(), t0))
			c.check(t, pkt, tcp, optionsOf(tcp))
		})
	}
}

// TestSynCookieNotAnswered: SYNs over the limit that the stack would not
// answer either are dropped, not answered.
func TestSynCookieNotAnswered(t *testing.T) {
	for _, c := range []struct {
		name  string
		frame pktgen.Frame
	}{
		{"SYN+FIN", with(cookieSYN("192.0.2.7", "198.51.100.1"), func(f *pktgen.Frame) {
			f.TCPFlags = pktgen.TCPSyn | pktgen.TCPFin
		})},
		{"SYN+RST", with(cookieSYN("192.0.2.7", "198.51.100.1"), func(f *pktgen.Frame) {
			f.TCPFlags = pktgen.TCPSyn | pktgen.TCPRst
		})},
		{"first fragment", with(cookieSYN("192.0.2.7", "198.51.100.1"), func(f *pktgen.Frame) {
			f.Frag = &pktgen.Fragment{More: true, ID: 7}
		})},
		{"IPv6 extension header", with(cookieSYN("2001:db8::7", "2001:db8::1"), func(f *pktgen.Frame) {
			f.Ext = []pktgen.ExtHeader{pktgen.ExtDestOpts}
		})},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := load(t, maps.ClockMap, cookiePolicy)
			in := c.frame.MustBuild()
			for i, want := range []uint32{xdpPass, xdpPass, xdpDrop} {
				if v, _ := runOut(t, l, in, t0); v != want {
					t.Fatalf("SYN %d: verdict %d, want %d", i+1, v, want)
				}
			}
			if n := counter(t, l, maps.CounterCookieUnanswered); n != 1 {
				t.Errorf("unanswered %d, want 1", n)
			}
		})
	}
}

// TestSynCookieHost: what the host's stack would offer decides the answer.
func TestSynCookieHost(t *testing.T) {
	l := loadWith(t, maps.Options{Clock: maps.ClockMap}, cookiePolicy)
	img := xdpltest.Compile(t, cookiePolicy)
	img.SynAck = maps.SynAck{MSS4: 1400, MSS6: 1380, TTL: 100, HopLimit: 90, WScale: 3, SACK: true, WindowScaling: true}
	if err := l.Apply(img); err != nil {
		t.Fatal(err)
	}
	pkt, tcp := synAck(t, answered(t, l, cookieSYN("192.0.2.7", "198.51.100.1").MustBuild(), t0))
	o := optionsOf(tcp)
	if ip := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ip.TTL != 100 {
		t.Errorf("TTL %d, want 100", ip.TTL)
	}
	// Timestamps off (tcp_timestamps=0): nothing but the MSS survives.
	if o.mss != 1400 || o.ts || o.sack || o.ws {
		t.Errorf("options %+v; want MSS 1400 alone", o)
	}
	img.SynAck.TTL = 0
	if err := l.Apply(img); err == nil {
		t.Error("a SYN-ACK TTL of 0 was applied")
	}
}
