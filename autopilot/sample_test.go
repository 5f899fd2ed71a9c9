// SPDX-License-Identifier: Apache-2.0

package autopilot

import (
	"net/netip"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/xdplimit/xdplimit/pktgen"
)

// What a sample reads of real frames: both IP versions, TCP's flags and
// option layout, a payload's first bytes; and nothing of a frame that is
// not TCP or UDP.
func TestFromFrame(t *testing.T) {
	src4, src6 := netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("2001:db8::7")
	dst6 := netip.MustParseAddr("2001:db8::10")
	syn := pktgen.Frame{Src: src4, Dst: server, Proto: pktgen.ProtoTCP, SrcPort: 4000, DstPort: 443, TTL: 57, TOS: 0x28,
		TCPOptions: []pktgen.TCPOption{pktgen.OptMSS(1460), pktgen.OptNOP(), pktgen.OptWScale(7)}}.MustBuild()
	s, ok := FromFrame(syn, time.Unix(5, 0))
	if !ok || s.Dst != web || s.SrcPort != 4000 || s.TTL != 57 || s.DSCP != 0x0a || s.TCPFlags != 0x02 ||
		s.Options != "2,1,3" || !s.HasIPID || s.Time != time.Unix(5, 0) {
		t.Errorf("SYN: %+v, %v", s, ok)
	}
	udp6 := pktgen.Frame{Src: src6, Dst: dst6, SrcPort: 5353, DstPort: 53, TTL: 33, Data: []byte("0123456789abcdefXYZ")}.MustBuild()
	s, ok = FromFrame(udp6, time.Time{})
	want := Dest{Addr: dst6, Proto: layers.IPProtocolUDP, Port: 53}
	if !ok || s.Dst != want || s.TTL != 33 || s.Length != 40+8+19 || s.HasIPID || string(s.Payload) != "0123456789abcdef" {
		t.Errorf("UDP over IPv6: %+v, %v", s, ok)
	}
	echo := pktgen.Frame{Src: src4, Dst: server, Proto: pktgen.ProtoICMP}.MustBuild()
	if s, ok := FromFrame(echo, time.Time{}); ok {
		t.Errorf("an ICMP echo read as %+v", s)
	}
}
