// SPDX-License-Identifier: Apache-2.0

// Package autopilot finds what a flood's packets share that normal traffic
// to the same destination lacks (its fingerprint), and writes it as a rule.
// The same functions judge a capture offline (xdplimit policy suggest) and
// the samples a running limiter takes.
package autopilot

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// Dest is what a flood is aimed at: an address, a transport protocol and
// its port.
type Dest struct {
	Addr  netip.Addr
	Proto layers.IPProtocol
	Port  uint16
}

func (d Dest) String() string {
	return fmt.Sprintf("%s %s port %d", strings.ToLower(d.Proto.String()), d.Addr, d.Port)
}

// PayloadBytes is how much of the transport payload a sample keeps.
const PayloadBytes = 16

// Sample is what a fingerprint reads of one packet: the fields an attack
// tool tends to fix and a real client's stack varies.
type Sample struct {
	Time     time.Time
	Dst      Dest
	SrcPort  uint16
	TTL      uint8  // the IPv4 TTL or the IPv6 hop limit
	Length   uint16 // the IP length, as rules match it
	IPID     uint16 // IPv4 only (HasIPID)
	HasIPID  bool
	DSCP     uint8
	TCPFlags uint8
	Window   uint16
	Options  string // the TCP options' kinds in order, e.g. "2,4,8,1,3"
	Payload  []byte // the first PayloadBytes of the transport payload
}

// FromFrame reads an Ethernet frame's sample; false for a frame that is
// not TCP or UDP over IPv4 or IPv6 (or is cut before its ports).
func FromFrame(data []byte, ts time.Time) (Sample, bool) {
	pkt := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.DecodeOptions{Lazy: true, NoCopy: true})
	s := Sample{Time: ts}
	switch ip := pkt.NetworkLayer().(type) {
	case *layers.IPv4:
		s.Dst.Addr, _ = netip.AddrFromSlice(ip.DstIP.To4())
		s.TTL, s.Length, s.DSCP = ip.TTL, ip.Length, ip.TOS>>2
		s.IPID, s.HasIPID = ip.Id, true
	case *layers.IPv6:
		s.Dst.Addr, _ = netip.AddrFromSlice(ip.DstIP)
		s.TTL, s.Length, s.DSCP = ip.HopLimit, 40+ip.Length, ip.TrafficClass>>2
	default:
		return s, false
	}
	var payload []byte
	switch tr := pkt.TransportLayer().(type) {
	case *layers.TCP:
		s.Dst.Proto, s.Dst.Port, s.SrcPort = layers.IPProtocolTCP, uint16(tr.DstPort), uint16(tr.SrcPort)
		if len(tr.Contents) > 13 {
			s.TCPFlags = tr.Contents[13]
		}
		s.Window = tr.Window
		kinds := make([]string, 0, len(tr.Options))
		for _, o := range tr.Options {
			kinds = append(kinds, fmt.Sprint(uint8(o.OptionType)))
		}
		s.Options = strings.Join(kinds, ",")
		payload = tr.Payload
	case *layers.UDP:
		s.Dst.Proto, s.Dst.Port, s.SrcPort = layers.IPProtocolUDP, uint16(tr.DstPort), uint16(tr.SrcPort)
		payload = tr.Payload
	default:
		return s, false
	}
	s.Payload = append([]byte(nil), payload[:min(len(payload), PayloadBytes)]...)
	return s, true
}
