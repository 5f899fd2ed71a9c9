// SPDX-License-Identifier: Apache-2.0

package pktgen

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"github.com/gopacket/gopacket/layers"
)

// Proto is the transport protocol of a Frame.
type Proto uint8

const (
	ProtoUDP  Proto = Proto(layers.IPProtocolUDP)
	ProtoTCP  Proto = Proto(layers.IPProtocolTCP)
	ProtoICMP Proto = 1 // ICMP for IPv4, ICMPv6 (58) for IPv6
)

// TCPFlags are the TCP header flag bits, valued as on the wire (byte 13), so
// tests can compare them with what a BPF parser extracts.
type TCPFlags uint8

const (
	TCPFin TCPFlags = 1 << iota
	TCPSyn
	TCPRst
	TCPPsh
	TCPAck
	TCPUrg
	TCPEce
	TCPCwr
)

// VLAN is one 802.1Q or 802.1ad tag.
type VLAN struct {
	// TPID is the tag's EtherType: 0x8100 (802.1Q, the default) or 0x88a8
	// (802.1ad, the outer tag of QinQ).
	TPID     uint16
	ID       uint16 // 12 bits
	Priority uint8  // 3 bits
}

// ExtHeader is an IPv6 extension header Frame can insert.
type ExtHeader uint8

const (
	ExtHopByHop ExtHeader = ExtHeader(layers.IPProtocolIPv6HopByHop) // 8 bytes, one PadN option
	ExtRouting  ExtHeader = ExtHeader(layers.IPProtocolIPv6Routing)  // 8 bytes, type 0, segments left 0
	ExtDestOpts ExtHeader = ExtHeader(layers.IPProtocolIPv6Destination)
)

// Fragment makes a Frame an IP fragment: the IPv4 header's MF flag and
// offset, or an IPv6 fragment header after the other extension headers.
// A fragment with Offset > 0 carries only payload bytes, no transport header.
type Fragment struct {
	Offset uint16 // in bytes; a multiple of 8
	More   bool
	ID     uint32 // IPv4 uses the low 16 bits
}

// Default MAC addresses: locally administered, so they never clash with a
// real device. Frames sent to a veth must carry its peer's MAC (SetMACs),
// or the receiving stack drops them as PACKET_OTHERHOST.
var (
	DefaultSrcMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}
	DefaultDstMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02}
)

// Frame describes an Ethernet frame. Src and Dst choose IPv4 or IPv6; zero
// fields take the defaults named in their comments. Build serialises it
// with gopacket, with correct lengths and checksums (for a first fragment
// the transport checksum covers only the bytes present). Like a real NIC's,
// frames are padded to the 60-byte Ethernet minimum; slice a frame for a
// truncated variant.
type Frame struct {
	SrcMAC, DstMAC net.HardwareAddr // DefaultSrcMAC, DefaultDstMAC
	VLANs          []VLAN           // outermost first
	Src, Dst       netip.Addr
	TTL            uint8 // or hop limit; 64
	TOS            uint8 // IPv4 TOS byte or IPv6 traffic class; 0
	Proto          Proto // ProtoUDP
	SrcPort        uint16
	DstPort        uint16
	TCPFlags       TCPFlags // TCPSyn when Proto is ProtoTCP and this is 0
	// NoTCPFlags builds a TCP segment with no flag set (a null scan), which
	// a zero TCPFlags cannot say; TCPFlags must then be 0.
	NoTCPFlags bool
	// TCPSeq and TCPAck are the segment's sequence and acknowledgment
	// numbers: 0 means 1 (the acknowledgment only with TCPAck set).
	TCPSeq, TCPAck uint32
	// TCPOptions are the segment's options in order (OptMSS, OptSACK,
	// OptTimestamps, OptWScale, OptNOP), padded to whole words with zeros.
	TCPOptions []TCPOption
	ICMP       *ICMPMessage // with ProtoICMP; nil: an echo request
	// IPv4Options adds that many 4-byte words of NOP options (0..10), for
	// parsers that must honour the IHL.
	IPv4Options int
	Ext         []ExtHeader // IPv6 extension headers, in order
	Frag        *Fragment
	// Payload is the number of bytes after the transport header (filled
	// with a counting pattern), or after the IP and extension headers for a
	// non-first fragment.
	Payload int
	// Data, when set, is the payload itself, such as a real server's answer
	// for a reflection flood; Payload must then be 0 or len(Data).
	Data []byte
}

// TCPOption is one TCP option: its kind and the bytes after the length.
type TCPOption struct {
	Kind uint8
	Data []byte
}

// The TCP options a SYN offers.
func OptNOP() TCPOption { return TCPOption{Kind: 1} }
func OptMSS(mss uint16) TCPOption {
	return TCPOption{Kind: 2, Data: binary.BigEndian.AppendUint16(nil, mss)}
}
func OptWScale(s uint8) TCPOption { return TCPOption{Kind: 3, Data: []byte{s}} }
func OptSACK() TCPOption          { return TCPOption{Kind: 4} }
func OptTimestamps(val, ecr uint32) TCPOption {
	return TCPOption{Kind: 8, Data: binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, val), ecr)}
}

// ICMPMessage is an ICMP or ICMPv6 type and code.
type ICMPMessage struct{ Type, Code uint8 }

// MustBuild is Build for fixtures: it panics on an invalid description,
// like regexp.MustCompile.
func (f Frame) MustBuild() []byte {
	b, err := f.Build()
	if err != nil {
		panic(err)
	}
	return b
}

func mustFamily(want4 bool, addrs ...netip.Addr) {
	for _, a := range addrs {
		if a.Unmap().Is4() != want4 {
			panic(fmt.Sprintf("pktgen: %v is not an IPv%d address", a, map[bool]int{true: 4, false: 6}[want4]))
		}
	}
}

// UDP4 builds an untagged IPv4/UDP frame with payload bytes of payload.
// With payload 18 the frame is 60 bytes, 64 on the wire with the FCS.
func UDP4(src, dst netip.Addr, sport, dport uint16, payload int) []byte {
	mustFamily(true, src, dst)
	return Frame{Src: src, Dst: dst, SrcPort: sport, DstPort: dport, Payload: payload}.MustBuild()
}

// UDP6 builds an untagged IPv6/UDP frame.
func UDP6(src, dst netip.Addr, sport, dport uint16, payload int) []byte {
	mustFamily(false, src, dst)
	return Frame{Src: src, Dst: dst, SrcPort: sport, DstPort: dport, Payload: payload}.MustBuild()
}

// TCP4 builds an untagged IPv4/TCP segment with the given flags.
func TCP4(src, dst netip.Addr, sport, dport uint16, flags TCPFlags, payload int) []byte {
	mustFamily(true, src, dst)
	return Frame{Src: src, Dst: dst, Proto: ProtoTCP, SrcPort: sport, DstPort: dport, TCPFlags: flags, Payload: payload}.MustBuild()
}

// TCP6 builds an untagged IPv6/TCP segment with the given flags.
func TCP6(src, dst netip.Addr, sport, dport uint16, flags TCPFlags, payload int) []byte {
	mustFamily(false, src, dst)
	return Frame{Src: src, Dst: dst, Proto: ProtoTCP, SrcPort: sport, DstPort: dport, TCPFlags: flags, Payload: payload}.MustBuild()
}

// ICMP4 builds an untagged ICMP echo request.
func ICMP4(src, dst netip.Addr, payload int) []byte {
	mustFamily(true, src, dst)
	return Frame{Src: src, Dst: dst, Proto: ProtoICMP, Payload: payload}.MustBuild()
}

// ICMP6 builds an untagged ICMPv6 echo request.
func ICMP6(src, dst netip.Addr, payload int) []byte {
	mustFamily(false, src, dst)
	return Frame{Src: src, Dst: dst, Proto: ProtoICMP, Payload: payload}.MustBuild()
}

// SetMACs overwrites a frame's Ethernet addresses in place (no checksum
// covers them) and returns it.
func SetMACs(frame []byte, src, dst net.HardwareAddr) []byte {
	copy(frame[0:6], dst)
	copy(frame[6:12], src)
	return frame
}

// SetSource4 overwrites the IPv4 source address of an untagged frame in
// place and fixes the header checksum: the limiter, like the stack, refuses
// a header whose checksum is wrong.
func SetSource4(frame []byte, src uint32) {
	binary.BigEndian.PutUint32(frame[14+12:], src)
	FixIPv4Checksum(frame)
}

// FixIPv4Checksum recomputes the header checksum of an untagged IPv4 frame
// after its header was changed.
func FixIPv4Checksum(frame []byte) {
	h := frame[14 : 14+int(frame[14]&0xf)*4]
	h[10], h[11] = 0, 0
	binary.BigEndian.PutUint16(h[10:], Checksum(0, h))
}

// Checksum is the Internet checksum of b with sum (a pseudo header's, or 0)
// added: the one's complement of the folded one's complement sum.
func Checksum(sum uint32, b []byte) uint16 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}
