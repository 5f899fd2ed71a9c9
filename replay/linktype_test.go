// SPDX-License-Identifier: Apache-2.0

package replay

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/xdplimit/xdplimit/pktgen"
)

// Captures without an Ethernet header: Linux cooked (SLL, SLL2) and raw IP,
// written here byte by byte as libpcap writes them, read and replayed.

var (
	src4 = netip.MustParseAddr("192.0.2.1")
	src6 = netip.MustParseAddr("2001:db8:1::1")
	dst6 = netip.MustParseAddr("2001:db8::1")
)

// Linux packet types (sll_pkttype) and the ARPHRD types used here.
const (
	pktHost     = 0
	pktOutgoing = 4
	arphrdEther = 1
)

// sllHeader is a LINKTYPE_LINUX_SLL header.
func sllHeader(pktType, proto uint16) []byte {
	h := make([]byte, sllLen)
	be := binary.BigEndian
	be.PutUint16(h[0:], pktType)
	be.PutUint16(h[2:], arphrdEther)
	be.PutUint16(h[4:], 6)
	copy(h[6:], pktgen.DefaultSrcMAC)
	be.PutUint16(h[14:], proto)
	return h
}

// sll2Header is a LINKTYPE_LINUX_SLL2 header.
func sll2Header(pktType uint8, proto uint16) []byte {
	h := make([]byte, sll2Len)
	be := binary.BigEndian
	be.PutUint16(h[0:], proto)
	be.PutUint32(h[4:], 7) // interface index
	be.PutUint16(h[8:], arphrdEther)
	h[10], h[11] = pktType, 6
	copy(h[12:], pktgen.DefaultSrcMAC)
	return h
}

// ipOf is the IP packet of an Ethernet frame, and its EtherType.
func ipOf(frame []byte) ([]byte, uint16) {
	return frame[ethHeaderLen:], binary.BigEndian.Uint16(frame[12:14])
}

// linkRec is one frame of a test capture: its IP packet (or other payload)
// and what a cooked capture says of it.
type linkRec struct {
	payload  []byte
	proto    uint16 // EtherType
	outgoing bool
}

// linkCapture writes recs as a pcap of link type lt, 1 ms apart. Raw IP
// link types cannot hold non-IP payloads or a direction: leave them out.
func linkCapture(t *testing.T, lt layers.LinkType, recs []linkRec) string {
	t.Helper()
	var buf bytes.Buffer
	w := pcapgo.NewWriterNanos(&buf)
	if err := w.WriteFileHeader(65536, lt); err != nil {
		t.Fatal(err)
	}
	for i, r := range recs {
		var data []byte
		switch lt {
		case layers.LinkTypeLinuxSLL:
			pt := uint16(pktHost)
			if r.outgoing {
				pt = pktOutgoing
			}
			data = append(sllHeader(pt, r.proto), r.payload...)
		case layers.LinkTypeLinuxSLL2:
			pt := uint8(pktHost)
			if r.outgoing {
				pt = pktOutgoing
			}
			data = append(sll2Header(pt, r.proto), r.payload...)
		default:
			data = r.payload
		}
		ci := gopacket.CaptureInfo{Timestamp: wallStart.Add(time.Duration(i) * time.Millisecond), CaptureLength: len(data), Length: len(data)}
		if err := w.WritePacket(ci, data); err != nil {
			t.Fatal(err)
		}
	}
	return writeBytes(t, "capture-"+strings.ReplaceAll(lt.String(), " ", "")+".pcap", buf.Bytes())
}

func writeBytes(t *testing.T, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Reading: each link type's frames come out as Ethernet frames with the
// right EtherType, the IP packet unchanged, the direction kept.
func TestCaptureLinkTypes(t *testing.T) {
	ip4, _ := ipOf(pktgen.UDP4(src4, dst4, 4000, 53, 18))
	ip6, _ := ipOf(pktgen.UDP6(src6, dst6, 4000, 53, 10))
	arp := bytes.Repeat([]byte{0xa5}, 28)
	for _, c := range []struct {
		lt     layers.LinkType
		cooked bool // can say non-IP and outgoing
	}{
		{layers.LinkTypeLinuxSLL, true},
		{layers.LinkTypeLinuxSLL2, true},
		{layers.LinkTypeRaw, false},
		{linkTypeDLTRaw12, false},
		{linkTypeDLTRaw14, false},
	} {
		t.Run(fmt.Sprintf("%s-%d", c.lt, int(c.lt)), func(t *testing.T) {
			recs := []linkRec{{payload: ip4, proto: etherIPv4}, {payload: ip6, proto: etherIPv6}}
			type frame struct {
				proto    uint16
				payload  []byte
				outgoing bool
			}
			want := []frame{{etherIPv4, ip4, false}, {etherIPv6, ip6, false}}
			if c.cooked {
				recs = append(recs, linkRec{payload: arp, proto: 0x0806}, linkRec{payload: ip4, proto: etherIPv4, outgoing: true})
				want = append(want, frame{0x0806, arp, false}, frame{etherIPv4, ip4, true})
			}
			got, err := readAll(readFile(t, linkCapture(t, c.lt, recs)))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("%d frames, want %d", len(got), len(want))
			}
			for i, w := range want {
				f := got[i]
				payload, proto := ipOf(f.Data)
				if !f.NoLinkLayer || proto != w.proto || !bytes.Equal(payload, w.payload) || f.Outgoing != w.outgoing ||
					f.Length != len(f.Data) || !bytes.Equal(f.Data[:12], make([]byte, 12)) {
					t.Errorf("frame %d: ethertype %#04x, outgoing %v, no link layer %v, length %d of %d, header % x; want ethertype %#04x, outgoing %v",
						f.Number, proto, f.Outgoing, f.NoLinkLayer, f.Length, len(f.Data), f.Data[:14], w.proto, w.outgoing)
				}
			}
		})
	}

	// Raw IPv4 and raw IPv6 link types, and a raw IP frame whose version
	// is neither 4 nor 6 (run as IPv4, which the program finds malformed).
	for _, c := range []struct {
		lt      layers.LinkType
		payload []byte
		proto   uint16
	}{
		{layers.LinkTypeIPv4, ip4, etherIPv4},
		{layers.LinkTypeIPv6, ip6, etherIPv6},
		{layers.LinkTypeRaw, append([]byte{0x50}, ip4[1:]...), etherIPv4},
	} {
		got, err := readAll(readFile(t, linkCapture(t, c.lt, []linkRec{{payload: c.payload}})))
		if err != nil {
			t.Fatal(err)
		}
		if p, proto := ipOf(got[0].Data); proto != c.proto || !bytes.Equal(p, c.payload) {
			t.Errorf("%s: ethertype %#04x", c.lt, proto)
		}
	}
}

// A snapped cooked frame keeps its length on the wire, less the cooked
// header, plus the Ethernet one; a record shorter than its cooked header
// has no frame left (short).
func TestCaptureCookedLengths(t *testing.T) {
	ip4, _ := ipOf(pktgen.UDP4(src4, dst4, 4000, 53, 200))
	var buf bytes.Buffer
	w := pcapgo.NewWriterNanos(&buf)
	if err := w.WriteFileHeader(100, layers.LinkTypeLinuxSLL2); err != nil {
		t.Fatal(err)
	}
	full := append(sll2Header(pktHost, etherIPv4), ip4...)
	for _, data := range [][]byte{full[:100], full[:12]} {
		ci := gopacket.CaptureInfo{Timestamp: wallStart, CaptureLength: len(data), Length: len(full)}
		if err := w.WritePacket(ci, data); err != nil {
			t.Fatal(err)
		}
	}
	got, err := readAll(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if f := got[0]; len(f.Data) != 100-sll2Len+ethHeaderLen || f.Length != len(ip4)+ethHeaderLen {
		t.Errorf("snapped frame: %d bytes captured, %d on the wire; want %d, %d", len(f.Data), f.Length, 100-sll2Len+ethHeaderLen, len(ip4)+ethHeaderLen)
	}
	if f := got[1]; len(f.Data) != 0 || !f.NoLinkLayer {
		t.Errorf("record shorter than its header: %d bytes", len(f.Data))
	}
}

func TestCaptureUnsupportedLinkType(t *testing.T) {
	var buf bytes.Buffer
	w := pcapgo.NewWriter(&buf)
	if err := w.WriteFileHeader(65536, layers.LinkTypeIEEE802_11); err != nil {
		t.Fatal(err)
	}
	if _, err := readAll(buf.Bytes()); err == nil || !strings.Contains(err.Error(), "link type 802.11 (105): only Ethernet, Linux cooked (SLL, SLL2: tcpdump -i any) and raw IP captures") {
		t.Errorf("802.11 pcap: %v", err)
	}

	// A pcapng whose second interface is 802.11: refused at its first
	// frame, naming it; its raw IP interface is fine.
	buf.Reset()
	ng, err := pcapgo.NewNgWriter(&buf, layers.LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := ng.AddInterface(pcapgo.NgInterface{Name: "tun0", LinkType: layers.LinkTypeRaw, TimestampResolution: 9})
	if err != nil {
		t.Fatal(err)
	}
	wifi, err := ng.AddInterface(pcapgo.NgInterface{Name: "wlan0", LinkType: layers.LinkTypeIEEE802_11, TimestampResolution: 9})
	if err != nil {
		t.Fatal(err)
	}
	frame := pktgen.UDP4(src4, dst4, 1, 2, 18)
	for _, p := range []struct {
		iface int
		data  []byte
	}{{0, frame}, {raw, frame[14:]}, {wifi, frame}} {
		ci := gopacket.CaptureInfo{Timestamp: wallStart, CaptureLength: len(p.data), Length: len(p.data), InterfaceIndex: p.iface}
		if err := ng.WritePacket(ci, p.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := ng.Flush(); err != nil {
		t.Fatal(err)
	}
	got, err := readAll(buf.Bytes())
	if len(got) != 2 || !bytes.Equal(got[1].Data, append(make([]byte, 12), append([]byte{8, 0}, frame[14:]...)...)) ||
		err == nil || !strings.Contains(err.Error(), "frame 3 (interface 2): link type 802.11 (105)") {
		t.Errorf("mixed pcapng: %d frames, %v", len(got), err)
	}
}

// linkPolicy limits DNS per source, and would catch every frame tagged
// with VLAN 7 first.
const linkPolicy = `
rules:
  - name: tagged
    match: {vlan: [7]}
    limit: {algorithm: token_bucket, rate: 1/h, burst: 1}
  - name: dns
    match: {protocol: udp, dst_ports: [53]}
    limit: {algorithm: token_bucket, rate: 1/h, burst: 2}
`

// Replaying each link type: the IP frames are judged as on Ethernet, the
// non-IP one is non-IP, the outgoing one is counted and not run, and no
// untagged frame matches the vlan rule; the tag a Linux cooked (SLL)
// capture keeps does.
func TestReplayLinkTypes(t *testing.T) {
	p := parsePolicy(t, linkPolicy)
	ip4, _ := ipOf(pktgen.UDP4(src4, dst4, 4000, 53, 18))
	ip6, _ := ipOf(pktgen.UDP6(src6, dst6, 4000, 53, 10))
	other, _ := ipOf(pktgen.UDP4(netip.MustParseAddr("192.0.2.9"), dst4, 4000, 53, 18))
	tagged := append([]byte{0, 7, 0x08, 0x00}, other...) // TCI VLAN 7, then the EtherType
	arp := bytes.Repeat([]byte{0xa5}, 28)
	eth := func(b []byte) uint64 { return uint64(ethHeaderLen + len(b)) }
	for _, lt := range []layers.LinkType{layers.LinkTypeLinuxSLL, layers.LinkTypeLinuxSLL2, layers.LinkTypeRaw, linkTypeDLTRaw12, linkTypeDLTRaw14} {
		t.Run(fmt.Sprintf("%s-%d", lt, int(lt)), func(t *testing.T) {
			recs := []linkRec{{ip4, etherIPv4, false}, {ip4, etherIPv4, false}, {ip6, etherIPv6, false}, {ip4, etherIPv4, false}, {ip4, etherIPv4, false}}
			cooked := lt == layers.LinkTypeLinuxSLL || lt == layers.LinkTypeLinuxSLL2
			if cooked {
				recs = append(recs, linkRec{arp, 0x0806, false}, linkRec{ip4, etherIPv4, true})
			}
			if lt == layers.LinkTypeLinuxSLL {
				recs = append(recs, linkRec{tagged, 0x8100, false})
			}
			r := replayFile(t, p, linkCapture(t, lt, recs), Options{Explain: []int{len(recs)}})
			dns := r.Rules[1]
			if dns.Pass != (Counts{3, 2*eth(ip4) + eth(ip6)}) || dns.Drop != (Counts{2, 2 * eth(ip4)}) {
				t.Errorf("dns: pass %+v, drop %+v", dns.Pass, dns.Drop)
			}
			wantTagged, wantNonIP, wantOut := Counts{}, Counts{}, Counts{}
			if cooked {
				wantNonIP, wantOut = Counts{1, eth(arp)}, Counts{1, eth(ip4)}
			}
			if lt == layers.LinkTypeLinuxSLL {
				wantTagged = Counts{1, eth(tagged)}
			}
			if r.Rules[0].Pass != wantTagged || r.NonIP != wantNonIP || r.Outgoing != wantOut || r.NoLinkLayer != len(recs) {
				t.Errorf("tagged %+v, non-IP %+v, outgoing %+v, %d frames without layer 2; want %+v, %+v, %+v, %d",
					r.Rules[0].Pass, r.NonIP, r.Outgoing, r.NoLinkLayer, wantTagged, wantNonIP, wantOut, len(recs))
			}
			var out bytes.Buffer
			if err := r.Write(&out); err != nil {
				t.Fatal(err)
			}
			note := fmt.Sprintf("note: %d frames captured without an Ethernet header (Linux cooked capture, raw IP): each ran behind a synthesised one", len(recs))
			if strings.Count(out.String(), "captured without an Ethernet header") != 1 || !strings.Contains(out.String(), note) {
				t.Errorf("the report does not say once that frames had no Ethernet header:\n%s", out.String())
			}
			if cooked != strings.Contains(out.String(), "note: 1 frame sent by the capturing host (outgoing): not run") {
				t.Errorf("outgoing note wrong:\n%s", out.String())
			}
		})
	}
}
