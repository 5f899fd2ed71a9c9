// SPDX-License-Identifier: Apache-2.0

package replay

import (
	"encoding/binary"
	"fmt"

	"github.com/gopacket/gopacket/layers"
)

// The program judges Ethernet frames, as XDP sees them on a device. Frames
// captured without an Ethernet header run behind one made up from what the
// capture says of them: the protocol field of a Linux cooked capture
// (tcpdump -i any), or the IP version of a raw IP capture.

// Link types a file may carry that hold raw IP: LINKTYPE_RAW (101) is what
// libpcap writes, but older libpcaps wrote the platform's DLT_RAW, which is
// 12 on most systems and 14 on OpenBSD and BSD/OS (libpcap's
// pcap-linktype(7), Wireshark's pcap-common.c; Wireshark reads both as raw
// IP). 228 and 229 are raw IPv4 and raw IPv6.
const (
	linkTypeDLTRaw12 layers.LinkType = 12
	linkTypeDLTRaw14 layers.LinkType = 14
)

// Linux cooked capture headers (libpcap's pcap/sll.h).
const (
	sllLen  = 16 // packet type, ARPHRD type, address length, address (8), protocol
	sll2Len = 20 // protocol, reserved, interface index, ARPHRD type, packet type, address length, address (8)

	// sllOutgoing is PACKET_OUTGOING: the capturing host sent the packet.
	sllOutgoing = 4
	// arphrdFRAD's protocol field is not an EtherType: the payload is a
	// Frame Relay frame.
	arphrdFRAD = 770
)

// EtherTypes of synthesised headers.
const (
	etherIPv4 = 0x0800
	etherIPv6 = 0x86dd
	// etherNonIP stands for a payload that has no EtherType: the IEEE 802
	// local experimental type, which the program counts as non-IP.
	etherNonIP = 0x88b5
)

// linkFrame is a captured frame made an Ethernet frame.
type linkFrame struct {
	data     []byte // an Ethernet frame; empty when the capture cut the link header itself
	wire     int    // its length on the wire
	noL2     bool   // the Ethernet header is synthesised
	outgoing bool   // sent by the capturing host
}

// toEthernet turns a frame of link type lt, wire bytes long on the wire,
// into an Ethernet frame.
func toEthernet(lt layers.LinkType, data []byte, wire int) (linkFrame, error) {
	wire = max(wire, len(data))
	switch lt {
	case layers.LinkTypeEthernet:
		return linkFrame{data: data, wire: wire}, nil
	case layers.LinkTypeLinuxSLL:
		return sll.frame(data, wire), nil
	case layers.LinkTypeLinuxSLL2:
		return sll2.frame(data, wire), nil
	case layers.LinkTypeRaw, linkTypeDLTRaw12, linkTypeDLTRaw14:
		// A version other than 4 or 6 runs as IPv4, which the program
		// then counts as malformed (a bad IP version): the link type
		// says the frame is IP.
		proto := uint16(etherIPv4)
		if len(data) > 0 && data[0]>>4 == 6 {
			proto = etherIPv6
		}
		return cooked(data, wire, proto, false), nil
	case layers.LinkTypeIPv4:
		return cooked(data, wire, etherIPv4, false), nil
	case layers.LinkTypeIPv6:
		return cooked(data, wire, etherIPv6, false), nil
	}
	return linkFrame{}, linkTypeError(lt)
}

// cookedHeader is where a Linux cooked header keeps what the replay reads,
// as byte offsets.
type cookedHeader struct {
	len, proto, hatype int
	pktType            int // one byte: the low byte of SLL's two-byte field
}

var (
	sll  = cookedHeader{len: sllLen, proto: 14, hatype: 2, pktType: 1}
	sll2 = cookedHeader{len: sll2Len, proto: 0, hatype: 8, pktType: 10}
)

// frame is a Linux cooked frame behind an Ethernet header with the cooked
// header's protocol. libpcap writes a VLAN tag the kernel took off back in
// after an SLL header (protocol 0x8100, then the tag): it stays, as on the
// wire.
func (h cookedHeader) frame(data []byte, wire int) linkFrame {
	if len(data) < h.len {
		return linkFrame{noL2: true}
	}
	be := binary.BigEndian
	proto := be.Uint16(data[h.proto:])
	if be.Uint16(data[h.hatype:]) == arphrdFRAD {
		proto = etherNonIP
	}
	return cooked(data[h.len:], wire-h.len, proto, data[h.pktType] == sllOutgoing)
}

// cooked puts an Ethernet header with EtherType proto before payload.
// The addresses are zero: the program does not read them.
func cooked(payload []byte, wire int, proto uint16, outgoing bool) linkFrame {
	eth := make([]byte, ethHeaderLen+len(payload))
	binary.BigEndian.PutUint16(eth[12:14], proto)
	copy(eth[ethHeaderLen:], payload)
	return linkFrame{data: eth, wire: ethHeaderLen + max(wire, len(payload)), noL2: true, outgoing: outgoing}
}

func linkTypeError(lt layers.LinkType) error {
	return fmt.Errorf("link type %s (%d): only Ethernet, Linux cooked (SLL, SLL2: tcpdump -i any) and raw IP captures can be replayed", lt, int(lt))
}
