// SPDX-License-Identifier: Apache-2.0

package maps_test

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"testing"

	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

// ipv4Fix rewrites the IPv4 header checksum of an untagged frame after a
// test changed a header field.
func ipv4Fix(b []byte) []byte {
	pktgen.FixIPv4Checksum(b)
	return b
}

var (
	upSrc4 = netip.MustParseAddr("192.0.2.9")
	upDst4 = netip.MustParseAddr("10.0.0.1")
	upSrc6 = netip.MustParseAddr("2001:db8:9::1")
	upDst6 = netip.MustParseAddr("2001:db8::1")
)

// unparsedFrames are frames the stack drops, each of one kind.
func unparsedFrames() []struct {
	kind  maps.UnparsedKind
	frame []byte
} {
	good := pktgen.UDP4(upSrc4, upDst4, 4000, 53, 18)
	long := slices.Clone(good)
	binary.BigEndian.PutUint16(long[16:], uint16(len(long)-14+1)) // one byte more than the frame
	short := slices.Clone(good)
	binary.BigEndian.PutUint16(short[16:], 19) // less than the header
	csum := slices.Clone(good)
	csum[24] ^= 0xff
	ihl := slices.Clone(good)
	ihl[14] = 0x44
	udplen := slices.Clone(good)
	binary.BigEndian.PutUint16(udplen[14+20+4:], 200)
	// Twelve tags cut inside the tenth: past the inline eight, in the walk.
	tags := pktgen.Frame{Src: upSrc4, Dst: upDst4, DstPort: 53, VLANs: make([]pktgen.VLAN, 12)}.MustBuild()
	tags = tags[:14+4*9+2]
	v6 := pktgen.UDP6(upSrc6, upDst6, 4000, 53, 18)
	v6[19]++ // payload length one past the frame
	return []struct {
		kind  maps.UnparsedKind
		frame []byte
	}{
		{maps.UnparsedTruncated, ipv4Fix(long)},
		{maps.UnparsedTruncated, good[:14+20+4]},
		{maps.UnparsedTruncated, v6},
		{maps.UnparsedBadLength, ipv4Fix(short)},
		{maps.UnparsedBadLength, udplen},
		{maps.UnparsedBadChecksum, csum},
		{maps.UnparsedBadHeader, ihl},
		{maps.UnparsedTruncated, tags},
	}
}

// Frames the stack drops are counted by kind, never charged to a rule, and
// pass by default.
func TestUnparsedNotCharged(t *testing.T) {
	l := loadWith(t, maps.Options{Clock: maps.ClockMap, Record: true}, `
rules:
  - name: r
    limit: {algorithm: token_bucket, rate: 1/m, burst: 1}
`)
	want := make([]uint64, maps.UnparsedKinds)
	for _, c := range unparsedFrames() {
		if v := xdpltest.Run(t, l, c.frame, t0); v != xdpPass {
			t.Errorf("%v frame %x: verdict %d, want pass", c.kind, c.frame, v)
		}
		p, err := l.LastParse()
		if err != nil {
			t.Fatal(err)
		}
		if p.Unparsed != c.kind {
			t.Errorf("frame %x: kind %v, want %v", c.frame, p.Unparsed, c.kind)
		}
		want[c.kind]++
	}
	got, err := l.UnparsedCounters()
	if err != nil {
		t.Fatal(err)
	}
	for k, n := range want {
		if got[k].Packets != n || got[k].Dropped != 0 {
			t.Errorf("%v: %+v, want %d packets, none dropped", maps.UnparsedKind(k), got[k], n)
		}
	}
	// The source's budget is untouched: its first deliverable packet passes.
	if v := xdpltest.Run(t, l, pktgen.UDP4(upSrc4, upDst4, 4000, 53, 18), t0); v != xdpPass {
		t.Errorf("a deliverable packet after the unparsed ones: verdict %d, want pass", v)
	}
}

func TestUnparsedPolicy(t *testing.T) {
	frame := unparsedFrames()[0].frame
	for _, c := range []struct {
		name, yaml, want string
	}{
		{"drop", "rules: []\nunparsed: {action: drop}\n", "DDD"},
		{"limit", "rules: []\nunparsed: {limit: {algorithm: token_bucket, rate: 1/m, burst: 2}}\n", "PPDD"},
		{"shadow", "mode: shadow\nrules: []\nunparsed: {action: drop}\n", "PPP"},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := load(t, maps.ClockMap, c.yaml)
			for i, w := range verdicts(c.want) {
				if v := xdpltest.Run(t, l, frame, t0); v != w {
					t.Fatalf("packet %d: verdict %d, want %d", i, v, w)
				}
			}
		})
	}
}

// What the stack delivers is judged: stacked VID-0 tags, IPv4 options, long
// IPv6 chains (as fragments, counted), and a first fragment whose transport
// header is cut short (as a fragment).
func TestDeliverableFramesJudged(t *testing.T) {
	l := loadWith(t, maps.Options{Clock: maps.ClockMap, Record: true}, `
rules:
  - name: r
    match: {protocol: udp, dst_ports: [53]}
    limit: {algorithm: token_bucket, rate: 1/m, burst: 1}
  - name: t
    match: {protocol: tcp, tcp_flags: [syn]}
    limit: {algorithm: token_bucket, rate: 1/m, burst: 1}
`)
	tinyFrag := pktgen.Frame{Src: netip.MustParseAddr("192.0.2.13"), Dst: upDst4, Proto: pktgen.ProtoTCP, DstPort: 80,
		Frag: &pktgen.Fragment{More: true, ID: 7}}.MustBuild()
	tinyFrag = ipv4Fix(append(tinyFrag[:14+20+8:14+20+8], make([]byte, 0)...))
	binary.BigEndian.PutUint16(tinyFrag[16:], 28)
	ipv4Fix(tinyFrag)
	for _, c := range []struct {
		name  string
		frame []byte
	}{
		{"three VID-0 tags", pktgen.Frame{Src: netip.MustParseAddr("192.0.2.10"), Dst: upDst4, DstPort: 53,
			VLANs: make([]pktgen.VLAN, 3)}.MustBuild()},
		{"eight tags", pktgen.Frame{Src: netip.MustParseAddr("192.0.2.11"), Dst: upDst4, DstPort: 53,
			VLANs: make([]pktgen.VLAN, 8)}.MustBuild()},
		{"nine tags (the walk)", pktgen.Frame{Src: netip.MustParseAddr("192.0.2.14"), Dst: upDst4, DstPort: 53,
			VLANs: make([]pktgen.VLAN, 9)}.MustBuild()},
		// As many as a test run's frame holds (its limit is the page less
		// headroom and skb_shared_info, as a driver's).
		{"800 tags", pktgen.Frame{Src: netip.MustParseAddr("192.0.2.15"), Dst: upDst4, DstPort: 53,
			VLANs: make([]pktgen.VLAN, 800)}.MustBuild()},
		{"IPv4 options", pktgen.Frame{Src: netip.MustParseAddr("192.0.2.12"), Dst: upDst4, DstPort: 53,
			IPv4Options: 10}.MustBuild()},
		{"40 extension headers", pktgen.Frame{Src: netip.MustParseAddr("2001:db8:a::1"), Dst: upDst6, DstPort: 53,
			Ext: slices.Repeat([]pktgen.ExtHeader{pktgen.ExtDestOpts}, 40)}.MustBuild()},
		{"32 extension headers", pktgen.Frame{Src: netip.MustParseAddr("2001:db8:b::1"), Dst: upDst6, DstPort: 53,
			Ext: slices.Repeat([]pktgen.ExtHeader{pktgen.ExtRouting}, 32)}.MustBuild()},
		{"tiny first TCP fragment", tinyFrag},
	} {
		if v := xdpltest.Run(t, l, c.frame, t0); v != xdpPass {
			t.Errorf("%s: first packet %d, want pass", c.name, v)
		}
		if v := xdpltest.Run(t, l, c.frame, t0); v != xdpDrop {
			p, err := l.LastParse()
			t.Errorf("%s: second packet %d, want drop (judged by the rule); parsed %+v (%v)\n%x", c.name, v, p, err, c.frame)
		}
	}
	got, err := l.UnparsedCounters()
	if err != nil {
		t.Fatal(err)
	}
	if got[maps.UnparsedLongChain].Packets != 2 {
		t.Errorf("too_many_headers counted %d, want 2", got[maps.UnparsedLongChain].Packets)
	}
}
