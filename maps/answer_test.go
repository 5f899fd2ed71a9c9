// SPDX-License-Identifier: Apache-2.0

package maps_test

import (
	"encoding/binary"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/xdplimit/xdplimit/pktgen"
)

// The answers the program builds in a frame and sends back with XDP_TX: the
// SYN-ACKs of syncookie rules, the resets and ICMP errors of reject rules.

const xdpTX = 3

// answer decodes an answer the program built, checking every length and
// checksum in it (pktgen.Checksum is 0 over bytes that include a correct
// checksum): the IPv4 header's, and the transport's (TCP and ICMPv6
// over their pseudo-header, ICMP without one).
func answer(t *testing.T, frame []byte) gopacket.Packet {
	t.Helper()
	pkt := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	var l4 []byte
	var proto layers.IPProtocol
	var pseudo []byte
	if ip4, ok := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok {
		if c := pktgen.Checksum(0, ip4.Contents); c != 0 {
			t.Errorf("IPv4 header checksum does not verify (%#x)", c)
		}
		l4, proto = ip4.Payload, ip4.Protocol
		if int(ip4.Length) != len(ip4.Contents)+len(l4) {
			t.Errorf("IPv4 total length %d, header and payload %d", ip4.Length, len(ip4.Contents)+len(l4))
		}
		pseudo = append(append(append([]byte{}, ip4.SrcIP.To4()...), ip4.DstIP.To4()...), 0, byte(proto))
		pseudo = binary.BigEndian.AppendUint16(pseudo, uint16(len(l4)))
	} else if ip6, ok := pkt.Layer(layers.LayerTypeIPv6).(*layers.IPv6); ok {
		l4, proto = ip6.Payload, ip6.NextHeader
		if int(ip6.Length) != len(l4) {
			t.Errorf("IPv6 payload length %d, payload %d", ip6.Length, len(l4))
		}
		pseudo = append(append([]byte{}, ip6.SrcIP...), ip6.DstIP...)
		pseudo = binary.BigEndian.AppendUint32(pseudo, uint32(len(l4)))
		pseudo = append(pseudo, 0, 0, 0, byte(proto))
	} else {
		t.Fatalf("neither IPv4 nor IPv6 in % x", frame)
	}
	// Built to its length: no padding, nothing of the packet left over.
	l3 := 0
	for _, l := range pkt.Layers() {
		if l == pkt.NetworkLayer() {
			break
		}
		l3 += len(l.LayerContents())
	}
	if want := l3 + len(pkt.NetworkLayer().LayerContents()) + len(l4); len(frame) != want {
		t.Errorf("frame of %d bytes, its IP packet ends at %d", len(frame), want)
	}
	if proto == layers.IPProtocolICMPv4 {
		pseudo = nil
	}
	if c := pktgen.Checksum(0, append(pseudo, l4...)); c != 0 {
		t.Errorf("%v checksum does not verify (%#x)", proto, c)
	}
	return pkt
}
