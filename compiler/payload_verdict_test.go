// SPDX-License-Identifier: Apache-2.0

package compiler_test

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/compiler"
	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

const payloadPolicy = `
rules:
  - {name: magic, match: {protocol: udp, payload: [{offset: 0, bytes: "deadbeef"}]}, limit: {algorithm: token_bucket, rate: 1000/s, burst: 1000}}
  - {name: masked, match: {protocol: udp, payload: [{offset: 4, bytes: "0100", mask: "ff0f"}]}, limit: {algorithm: token_bucket, rate: 1000/s, burst: 1000}}
  - {name: get, match: {protocol: tcp, payload: [{offset: 0, bytes: "474554"}]}, limit: {algorithm: token_bucket, rate: 1000/s, burst: 1000}}
  - {name: deep, match: {payload: [{offset: 100, bytes: "ff"}]}, limit: {algorithm: token_bucket, rate: 1000/s, burst: 1000}}
  - {name: ping, match: {protocol: icmp, payload: [{offset: 0, bytes: "abcd"}]}, limit: {algorithm: token_bucket, rate: 1000/s, burst: 1000}}
  - {name: rest, limit: {algorithm: token_bucket, rate: 1000/s, burst: 1000}}
`

// Payload matches through the real program under BPF_PROG_TEST_RUN: the
// bytes are found behind every header the parser walks (IPv4 options, VLAN
// tags, IPv6 extension headers, TCP options), compared under the mask, and
// a payload too short for them does not match; a fragment, whose payload
// the stack reassembles first, matches every payload rule.
func TestPayloadVerdicts(t *testing.T) {
	l := xdpltest.Load(t, maps.Options{Clock: maps.ClockMap, Record: true, MaxSources: 1 << 12}, payloadPolicy)
	const (
		magic, masked, get, deep, ping, rest = 0, 1, 2, 3, 4, 5
	)
	v4, v6 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8:1::1")
	d4, d6 := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("2001:db8::1")
	udp := func(src netip.Addr, data []byte) pktgen.Frame {
		dst := d4
		if src.Is6() {
			dst = d6
		}
		return pktgen.Frame{Src: src, Dst: dst, SrcPort: 4000, DstPort: 9000, Data: data}
	}
	tcp := func(data []byte, opts ...pktgen.TCPOption) pktgen.Frame {
		return pktgen.Frame{Src: v4, Dst: d4, Proto: pktgen.ProtoTCP, TCPFlags: pktgen.TCPAck | pktgen.TCPPsh,
			SrcPort: 4000, DstPort: 80, TCPOptions: opts, Data: data}
	}
	with := func(f pktgen.Frame, edit func(*pktgen.Frame)) pktgen.Frame { edit(&f); return f }
	magicBytes := []byte("\xde\xad\xbe\xef\x01\x02\x03")
	deepBytes := make([]byte, 101)
	deepBytes[100] = 0xff
	for _, tc := range []struct {
		name string
		f    pktgen.Frame
		rule int
	}{
		{"udp, the bytes", udp(v4, magicBytes), magic},
		{"udp, one bit off", udp(v4, []byte("\xde\xad\xbe\xee\x01\x02")), rest},
		{"udp, payload ends inside the bytes", udp(v4, []byte("\xde\xad\xbe")), rest},
		{"udp, no payload", udp(v4, nil), rest},
		{"udp, exactly the bytes", udp(v4, magicBytes[:4]), magic},
		{"udp, masked bytes equal", udp(v4, []byte("abcd\x01\x30")), masked},
		{"udp, masked bytes differ in a masked bit", udp(v4, []byte("abcd\x01\x31")), rest},
		{"udp, masked bytes differ in the first byte", udp(v4, []byte("abcd\x02\x00")), rest},
		{"udp behind IPv4 options", with(udp(v4, magicBytes), func(f *pktgen.Frame) { f.IPv4Options = 3 }), magic},
		{"udp behind a VLAN tag", with(udp(v4, magicBytes), func(f *pktgen.Frame) { f.VLANs = []pktgen.VLAN{{ID: 7}} }), magic},
		{"udp over IPv6", udp(v6, magicBytes), magic},
		{"udp over IPv6 behind extension headers", with(udp(v6, magicBytes), func(f *pktgen.Frame) {
			f.Ext = []pktgen.ExtHeader{pktgen.ExtHopByHop, pktgen.ExtDestOpts, pktgen.ExtDestOpts}
		}), magic},
		{"tcp, no options", tcp([]byte("GET / HTTP/1.1")), get},
		{"tcp behind options", tcp([]byte("GET /"), pktgen.OptMSS(1460), pktgen.OptNOP(), pktgen.OptWScale(7), pktgen.OptTimestamps(1, 2)), get},
		{"tcp, the bytes in the options' place only", tcp([]byte("PUT /"), pktgen.OptMSS(0x4745)), rest},
		{"any protocol, byte 100", tcp(deepBytes), deep},
		{"any protocol, payload of 100 bytes", tcp(deepBytes[:100]), rest},
		{"icmp echo", pktgen.Frame{Src: v4, Dst: d4, Proto: pktgen.ProtoICMP, Data: []byte("\xab\xcd\x00\x00")}, ping},
		{"icmp echo, other bytes", pktgen.Frame{Src: v4, Dst: d4, Proto: pktgen.ProtoICMP, Data: []byte("\xab\xce\x00\x00")}, rest},
		// The stack reassembles before it reads the payload.
		{"udp first fragment, other bytes", with(udp(v4, []byte("xxxxxxxxxxxxxxxx")), func(f *pktgen.Frame) {
			f.Frag = &pktgen.Fragment{More: true, ID: 5}
		}), magic},
		{"udp non-first fragment", with(udp(v4, nil), func(f *pktgen.Frame) {
			f.Frag, f.Payload = &pktgen.Fragment{Offset: 64, ID: 5}, 16
		}), magic},
		{"udp over IPv6, first fragment", with(udp(v6, []byte("xxxxxxxxxxxxxxxx")), func(f *pktgen.Frame) {
			f.Frag = &pktgen.Fragment{More: true, ID: 5}
		}), magic},
	} {
		passedByRule(t, l, tc.name, tc.f, tc.rule)
	}
}

// A flow that a payload rule refuses is not refused as a flow: its next
// packet without the bytes goes to the rule its payload picks. A flow
// cache keyed by the headers alone would drop it.
func TestPayloadRefusalIsNotAFlow(t *testing.T) {
	l := xdpltest.Load(t, maps.Options{Clock: maps.ClockMap, Record: true, MaxSources: 1 << 12}, `
rules:
  - {name: magic, match: {protocol: udp, payload: [{offset: 0, bytes: "deadbeef"}]}, limit: {algorithm: token_bucket, rate: 1/s, burst: 1}}
  - {name: rest, limit: {algorithm: token_bucket, rate: 1000/s, burst: 1000}}
`)
	f := pktgen.Frame{Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("10.0.0.1"), SrcPort: 4000, DstPort: 9000}
	bad, good := f, f
	bad.Data, good.Data = []byte("\xde\xad\xbe\xef"), []byte("hello")
	now := 10 * time.Second
	if v := xdpltest.Run(t, l, bad.MustBuild(), now); v != 2 {
		t.Fatalf("first magic packet: verdict %d, want pass (burst 1)", v)
	}
	for i := range 5 {
		if v := xdpltest.Run(t, l, bad.MustBuild(), now); v != 1 {
			t.Fatalf("magic packet %d: verdict %d, want drop", i+2, v)
		}
		if v := xdpltest.Run(t, l, good.MustBuild(), now); v != 2 {
			t.Fatalf("the same flow without the bytes, after %d refusals: verdict %d, want pass", i+1, v)
		}
		d, err := l.LastDecision()
		if err != nil {
			t.Fatal(err)
		}
		if d.Rule != 1 {
			t.Fatalf("the same flow without the bytes: rule %d, want rest", d.Rule)
		}
	}
}

// The compiler gathers rules into windows by start and mask, and refuses
// a policy with more windows than the datapath looks up.
func TestPayloadWindows(t *testing.T) {
	img := xdpltest.Compile(t, payloadPolicy)
	if img.Dims&maps.DimPayload == 0 || len(img.Payload) != 5 {
		t.Fatalf("dims %#x, %d windows; want the payload dimension and 5 windows", img.Dims, len(img.Payload))
	}
	same := xdpltest.Compile(t, `
rules:
  - {name: a, match: {payload: [{offset: 2, bytes: "0001"}]}, limit: {algorithm: token_bucket, rate: 1/s, burst: 1}}
  - {name: b, match: {payload: [{offset: 2, bytes: "0002"}]}, limit: {algorithm: token_bucket, rate: 1/s, burst: 1}}
  - {name: c, limit: {algorithm: token_bucket, rate: 1/s, burst: 1}}
`)
	if len(same.Payload) != 1 || len(same.Payload[0].Values) != 2 || same.Payload[0].Need != 2 || same.Payload[0].Off != 2 {
		t.Fatalf("two rules on one window: %+v", same.Payload)
	}
	if same.Payload[0].Absent.W[0] != 1<<2 {
		t.Errorf("absent %#x, want only rule c", same.Payload[0].Absent.W[0])
	}
	var b strings.Builder
	b.WriteString("rules:\n")
	for i := range maps.PayloadShapes + 1 {
		b.WriteString("  - {name: r" + string(rune('a'+i)) + ", match: {payload: [{offset: " +
			string(rune('0'+i)) + ", bytes: \"01\"}]}, limit: {algorithm: token_bucket, rate: 1/s, burst: 1}}\n")
	}
	if _, _, err := compiler.CompileYAML("many.yaml", []byte(b.String())); err == nil || !strings.Contains(err.Error(), "distinct windows") {
		t.Fatalf("%d windows: err %v, want the datapath's bound", maps.PayloadShapes+1, err)
	}
}
