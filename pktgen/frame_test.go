// SPDX-License-Identifier: Apache-2.0

package pktgen

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

var (
	src4 = netip.MustParseAddr("198.18.0.1")
	dst4 = netip.MustParseAddr("198.18.0.2")
	src6 = netip.MustParseAddr("2001:2::1")
	dst6 = netip.MustParseAddr("2001:2::2")
)

// onesSum is the RFC 1071 one's-complement sum, folded.
func onesSum(sum uint32, b []byte) uint32 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = (sum & 0xffff) + (sum >> 16)
	}
	return sum
}

// checkChecksums verifies the IPv4 header checksum and the transport
// checksum (with its pseudo-header) independently of gopacket, reporting
// with t.Errorf so that any goroutine may call it.
func checkChecksums(t *testing.T, frame []byte) {
	t.Helper()
	l, err := parseLayout(frame)
	if err != nil {
		t.Errorf("parse: %v", err) // not Fatal: callers may be off the test goroutine
		return
	}
	if l.is4 {
		l3 := l.srcOff - 12
		ihl := int(frame[l3]&0x0f) * 4
		if s := onesSum(0, frame[l3:l3+ihl]); s != 0xffff {
			t.Errorf("IPv4 header checksum wrong (sum %#x)", s)
		}
	}
	if l.l4CsumOff < 0 {
		return
	}
	// The transport length comes from the IP header, so it covers only the
	// bytes present in a first fragment, as Build's checksum does.
	var sum uint32
	var l4Len int
	if l.is4 {
		l3 := l.srcOff - 12
		l4Len = int(binary.BigEndian.Uint16(frame[l3+2:])) - (l.l4Off - l3)
		sum = onesSum(0, frame[l.srcOff:l.srcOff+8])
		if l.udp && binary.BigEndian.Uint16(frame[l.l4CsumOff:]) == 0 {
			return
		}
	} else {
		l3 := l.srcOff - 8
		l4Len = int(binary.BigEndian.Uint16(frame[l3+4:])) + 40 - (l.l4Off - l3)
		sum = onesSum(0, frame[l.srcOff:l.srcOff+32])
	}
	proto := l.proto
	sum += uint32(proto) + uint32(l4Len)
	if s := onesSum(sum, frame[l.l4Off:l.l4Off+l4Len]); s != 0xffff {
		t.Errorf("transport checksum wrong (sum %#x)", s)
	}
}

// Frames shorter than 60 bytes come out padded to 60, the Ethernet minimum,
// as gopacket's Ethernet layer pads them.
func TestFrames(t *testing.T) {
	for _, tc := range []struct {
		name   string
		frame  []byte
		length int
		want   []gopacket.LayerType
	}{
		{"UDP4 64-byte", UDP4(src4, dst4, 1, 2, 18), 60,
			[]gopacket.LayerType{layers.LayerTypeEthernet, layers.LayerTypeIPv4, layers.LayerTypeUDP}},
		{"UDP6", UDP6(src6, dst6, 1, 2, 10), 14 + 40 + 8 + 10,
			[]gopacket.LayerType{layers.LayerTypeEthernet, layers.LayerTypeIPv6, layers.LayerTypeUDP}},
		{"TCP4 SYN|ACK", TCP4(src4, dst4, 1, 2, TCPSyn|TCPAck, 0), 60,
			[]gopacket.LayerType{layers.LayerTypeEthernet, layers.LayerTypeIPv4, layers.LayerTypeTCP}},
		{"TCP6 RST", TCP6(src6, dst6, 1, 2, TCPRst, 4), 14 + 40 + 20 + 4,
			[]gopacket.LayerType{layers.LayerTypeEthernet, layers.LayerTypeIPv6, layers.LayerTypeTCP}},
		{"ICMP4", ICMP4(src4, dst4, 8), 60,
			[]gopacket.LayerType{layers.LayerTypeEthernet, layers.LayerTypeIPv4, layers.LayerTypeICMPv4}},
		{"ICMP6", ICMP6(src6, dst6, 8), 14 + 40 + 8 + 8,
			[]gopacket.LayerType{layers.LayerTypeEthernet, layers.LayerTypeIPv6, layers.LayerTypeICMPv6, layers.LayerTypeICMPv6Echo}},
		{"QinQ UDP4", Frame{Src: src4, Dst: dst4, VLANs: []VLAN{{TPID: 0x88a8, ID: 100}, {ID: 200}}}.MustBuild(), 60,
			[]gopacket.LayerType{layers.LayerTypeEthernet, layers.LayerTypeDot1Q, layers.LayerTypeDot1Q, layers.LayerTypeIPv4, layers.LayerTypeUDP}},
		{"IPv4 options", Frame{Src: src4, Dst: dst4, IPv4Options: 2}.MustBuild(), 60,
			[]gopacket.LayerType{layers.LayerTypeEthernet, layers.LayerTypeIPv4, layers.LayerTypeUDP}},
		{"IPv4 first fragment", Frame{Src: src4, Dst: dst4, Frag: &Fragment{More: true, ID: 7}, Payload: 20}.MustBuild(), 14 + 20 + 8 + 20,
			// gopacket leaves every fragment undecoded, even the first.
			[]gopacket.LayerType{layers.LayerTypeEthernet, layers.LayerTypeIPv4, gopacket.LayerTypeFragment}},
		{"IPv4 later fragment", Frame{Src: src4, Dst: dst4, Frag: &Fragment{Offset: 24, ID: 7}, Payload: 40}.MustBuild(), 14 + 20 + 40,
			[]gopacket.LayerType{layers.LayerTypeEthernet, layers.LayerTypeIPv4, gopacket.LayerTypeFragment}},
		{"IPv6 ext chain", Frame{Src: src6, Dst: dst6, Proto: ProtoTCP, Ext: []ExtHeader{ExtHopByHop, ExtDestOpts, ExtRouting}}.MustBuild(), 14 + 40 + 24 + 20,
			[]gopacket.LayerType{layers.LayerTypeEthernet, layers.LayerTypeIPv6, layers.LayerTypeIPv6HopByHop, layers.LayerTypeIPv6Destination, layers.LayerTypeIPv6Routing, layers.LayerTypeTCP}},
		{"IPv6 later fragment", Frame{Src: src6, Dst: dst6, Ext: []ExtHeader{ExtHopByHop}, Frag: &Fragment{Offset: 8, More: true, ID: 9}, Payload: 8}.MustBuild(), 14 + 40 + 8 + 8 + 8,
			[]gopacket.LayerType{layers.LayerTypeEthernet, layers.LayerTypeIPv6, layers.LayerTypeIPv6HopByHop, layers.LayerTypeIPv6Fragment, gopacket.LayerTypeFragment}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.frame) != tc.length {
				t.Errorf("length %d, want %d", len(tc.frame), tc.length)
			}
			p := gopacket.NewPacket(tc.frame, layers.LayerTypeEthernet, gopacket.Default)
			if el := p.ErrorLayer(); el != nil {
				t.Fatalf("decode: %v", el.Error())
			}
			var got []gopacket.LayerType
			for _, l := range p.Layers() {
				if l.LayerType() != gopacket.LayerTypePayload {
					got = append(got, l.LayerType())
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("layers %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("layers %v, want %v", got, tc.want)
				}
			}
			checkChecksums(t, tc.frame)
		})
	}
}

func TestFrameDetails(t *testing.T) {
	f := Frame{Src: src4, Dst: dst4, VLANs: []VLAN{{TPID: 0x88a8, ID: 100, Priority: 3}, {ID: 200}}}.MustBuild()
	if binary.BigEndian.Uint16(f[12:]) != 0x88a8 || binary.BigEndian.Uint16(f[14:])&0xfff != 100 || f[14]>>5 != 3 ||
		binary.BigEndian.Uint16(f[16:]) != 0x8100 || binary.BigEndian.Uint16(f[18:])&0xfff != 200 ||
		binary.BigEndian.Uint16(f[20:]) != 0x0800 {
		t.Errorf("VLAN tags wrong: % x", f[12:22])
	}

	tcp := TCP4(src4, dst4, 1, 2, TCPFin|TCPPsh|TCPAck|TCPCwr, 0)
	if tcp[14+20+13] != byte(TCPFin|TCPPsh|TCPAck|TCPCwr) {
		t.Errorf("TCP flags byte %#x", tcp[14+20+13])
	}

	for _, src := range []netip.Addr{src4, src6} {
		dst := dst4
		if src.Is6() {
			dst = dst6
		}
		null := Frame{Src: src, Dst: dst, Proto: ProtoTCP, NoTCPFlags: true}.MustBuild()
		l4 := 14 + 40
		if src.Is4() {
			l4 = 14 + 20
		}
		if null[l4+13] != 0 {
			t.Errorf("NoTCPFlags from %v: flags byte %#x, want 0", src, null[l4+13])
		}
		checkChecksums(t, null)
	}

	frag := Frame{Src: src4, Dst: dst4, Frag: &Fragment{Offset: 1480, More: true, ID: 0x1234}}.MustBuild()
	if ff := binary.BigEndian.Uint16(frag[14+6:]); ff != 0x2000|1480/8 {
		t.Errorf("IPv4 flags/offset %#x", ff)
	}
	if frag[14+9] != 17 {
		t.Errorf("IPv4 protocol %d", frag[14+9])
	}

	frag6 := Frame{Src: src6, Dst: dst6, Frag: &Fragment{Offset: 1232, ID: 5}}.MustBuild()
	if frag6[14+6] != 44 || frag6[14+40] != 17 || binary.BigEndian.Uint16(frag6[14+42:]) != 1232 {
		t.Errorf("IPv6 fragment header % x", frag6[14+40:14+48])
	}

	sig4 := Frame{Src: src4, Dst: dst4, Proto: ProtoICMP, TOS: 0xb8, ICMP: &ICMPMessage{Type: 3, Code: 4}}.MustBuild()
	if sig4[14+1] != 0xb8 || sig4[14+20] != 3 || sig4[14+21] != 4 {
		t.Errorf("IPv4 TOS %#x, ICMP type %d code %d", sig4[14+1], sig4[14+20], sig4[14+21])
	}
	sig6 := Frame{Src: src6, Dst: dst6, Proto: ProtoICMP, TOS: 0xb9, ICMP: &ICMPMessage{Type: 135}}.MustBuild()
	if tc := binary.BigEndian.Uint16(sig6[14:]) >> 4 & 0xff; tc != 0xb9 || sig6[14+40] != 135 || sig6[14+41] != 0 {
		t.Errorf("IPv6 traffic class %#x, ICMPv6 type %d code %d", tc, sig6[14+40], sig6[14+41])
	}

	mac := SetMACs(UDP4(src4, dst4, 1, 2, 0), DefaultDstMAC, DefaultSrcMAC)
	if mac[5] != 1 || mac[11] != 2 {
		t.Errorf("SetMACs: % x", mac[:12])
	}

	for _, bad := range []Frame{
		{Src: src4},
		{Src: src4, Dst: dst6},
		{Src: src4, Dst: dst4, Ext: []ExtHeader{ExtHopByHop}},
		{Src: src6, Dst: dst6, Ext: []ExtHeader{ExtDestOpts, ExtHopByHop}},
		{Src: src4, Dst: dst4, Frag: &Fragment{Offset: 3}},
		{Src: src4, Dst: dst4, Payload: -1},
		{Src: src4, Dst: dst4, Payload: 3, Data: []byte("four")},
		{Src: src4, Dst: dst4, Proto: ProtoTCP, TCPFlags: TCPSyn, NoTCPFlags: true},
	} {
		if _, err := bad.Build(); err == nil {
			t.Errorf("%+v built without error", bad)
		}
	}
}

func TestParseLayout(t *testing.T) {
	for _, tc := range []struct {
		name             string
		frame            []byte
		src, ipc, l4, is int
		udp              bool
	}{
		{"UDP4", UDP4(src4, dst4, 1, 2, 0), 26, 24, 40, 4, true},
		{"UDP6 QinQ", Frame{Src: src6, Dst: dst6, VLANs: []VLAN{{TPID: 0x88a8}, {}}}.MustBuild(), 30, -1, 68, 6, true},
		{"TCP4 options", Frame{Src: src4, Dst: dst4, Proto: ProtoTCP, IPv4Options: 1}.MustBuild(), 26, 24, 14 + 24 + 16, 4, false},
		{"ICMP4", ICMP4(src4, dst4, 0), 26, 24, -1, 4, false},
		{"ICMP6 ext", Frame{Src: src6, Dst: dst6, Proto: ProtoICMP, Ext: []ExtHeader{ExtHopByHop, ExtRouting}}.MustBuild(), 22, -1, 14 + 40 + 16 + 2, 6, false},
		{"IPv4 later fragment", Frame{Src: src4, Dst: dst4, Frag: &Fragment{Offset: 8}}.MustBuild(), 26, 24, -1, 4, false},
		{"IPv6 first fragment", Frame{Src: src6, Dst: dst6, Frag: &Fragment{More: true}}.MustBuild(), 22, -1, 14 + 48 + 6, 6, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := parseLayout(tc.frame)
			if err != nil {
				t.Fatal(err)
			}
			is := 6
			if l.is4 {
				is = 4
			}
			if l.srcOff != tc.src || l.ipCsumOff != tc.ipc || l.l4CsumOff != tc.l4 || is != tc.is || l.udp != tc.udp {
				t.Errorf("layout %+v, want src %d ipcsum %d l4csum %d v%d udp %v", l, tc.src, tc.ipc, tc.l4, tc.is, tc.udp)
			}
		})
	}
	full := UDP6(src6, dst6, 1, 2, 0)
	for _, n := range []int{0, 13, 20, 14 + 39} {
		if _, err := parseLayout(full[:n]); err == nil {
			t.Errorf("truncated to %d bytes: no error", n)
		}
	}
	// Truncated inside UDP: parsed, but no checksum to maintain.
	if l, err := parseLayout(full[:14+40+4]); err != nil || l.l4CsumOff != -1 {
		t.Errorf("truncated UDP: %+v, %v", l, err)
	}
}

// TestFrameTCPOptions: a SYN's sequence number and options come out as
// written, padded to whole words.
func TestFrameTCPOptions(t *testing.T) {
	f := Frame{Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2"), Proto: ProtoTCP,
		SrcPort: 40000, DstPort: 443, TCPSeq: 0x01020304,
		TCPOptions: []TCPOption{OptMSS(1460), OptSACK(), OptTimestamps(7, 0), OptNOP(), OptWScale(7)}}
	b, err := f.Build()
	if err != nil {
		t.Fatal(err)
	}
	tcp := b[14+20:]
	if got := binary.BigEndian.Uint32(tcp[4:]); got != 0x01020304 {
		t.Errorf("seq %#x", got)
	}
	if doff := int(tcp[12]>>4) * 4; doff != 20+20 {
		t.Errorf("data offset %d, want 40 (4+2+10+1+3 option bytes)", doff)
	}
	want := []byte{2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0, 0, 0, 7, 0, 0, 0, 0, 1, 3, 3, 7}
	if got := tcp[20:40]; !bytes.Equal(got, want) {
		t.Errorf("options % x, want % x", got, want)
	}
}

// TestFrameData: a payload given as bytes comes out as written, its length
// and checksum counted, and the generator's source rewrite keeps the
// checksum right.
func TestFrameData(t *testing.T) {
	data := []byte("VALUE k 0 3\r\nabc\r\nEND\r\n")
	b, err := Frame{Src: src4, Dst: dst4, SrcPort: 11211, DstPort: 40000, Data: data}.Build()
	if err != nil {
		t.Fatal(err)
	}
	if got := b[14+20+8:]; !bytes.Equal(got, data) {
		t.Errorf("payload %q, want %q", got, data)
	}
	checkChecksums(t, b)
	l, err := parseLayout(b)
	if err != nil {
		t.Fatal(err)
	}
	setSource(b, l, netip.MustParseAddr("10.1.2.3"))
	checkChecksums(t, b)
}
