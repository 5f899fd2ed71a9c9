// SPDX-License-Identifier: Apache-2.0

package replay

// The mixed capture: legitimate traffic and attacks together, replayed
// enforcing, in shadow mode and with the datapath's sketch.

import (
	"bytes"
	"cmp"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/model"
	"github.com/xdplimit/xdplimit/pktgen"
	"github.com/xdplimit/xdplimit/policy"
)

// mixed is legitimate traffic and attacks together, with every outcome
// outside the rules too; the explain test reuses it.
type mixed struct {
	policy *policy.Policy
	rules  []mRule
	frames []rec
}

const mixedPolicy = `
allow: [192.0.2.53/32]
deny: [203.0.113.0/24]
rules:
  - name: dns-responses
    match: {protocol: udp, src_ports: [53]}
    limit: {algorithm: token_bucket, rate: 20/s, burst: 10}
    aggregate:
      - key: global
        limit: {algorithm: token_bucket, rate: 16Mbit/s, burst: 50000B}
  - name: web-syn
    match: {protocol: tcp, dst_ports: [443], tcp_flags: [syn]}
    key: {ipv4_prefix: 24, ipv6_prefix: 48}
    limit: {algorithm: fixed_window, packets: 20, window: 100ms}
  - name: tcp
    match: {protocol: tcp}
    key: src_ip+dst_port
    limit: {algorithm: sliding_window, packets: 30, window: 200ms}
    action: shadow
`

func newMixed(t *testing.T) mixed {
	p := parsePolicy(t, mixedPolicy)
	rules := []mRule{
		{name: "dns-responses", levels: []mLevel{
			{params: tokenBucket(t, 20, time.Second, 10, false), kind: policy.KeySrcIP, p4: 32, p6: 64},
			{params: tokenBucket(t, 2_000_000, time.Second, 50000, true), bytes: true, kind: policy.KeyGlobal},
		}},
		{name: "web-syn", levels: []mLevel{
			{params: window(t, model.AlgFixedWindow, 20, 100*time.Millisecond), kind: policy.KeySrcIP, p4: 24, p6: 48},
		}},
		{name: "tcp", shadow: true, levels: []mLevel{
			{params: window(t, model.AlgSlidingWindow, 30, 200*time.Millisecond), kind: policy.KeySrcIPDstPort, p4: 32, p6: 64},
		}},
	}
	rng := rand.New(rand.NewPCG(5, 6))
	var frames []rec
	add := func(at time.Duration, data []byte, why maps.Why, rule int, src netip.Addr, port uint16) {
		frames = append(frames, rec{at: at, data: data, why: why, rule: rule, src: src, port: port})
	}
	span := int64(500 * time.Millisecond)
	randAt := func() time.Duration { return time.Duration(rng.Int64N(span)) }
	// Legitimate: 20 web clients open a connection and send 40 segments
	// each, the connections to 443 a little over the shadow limit.
	for c := 1; c <= 20; c++ {
		src := netip.AddrFrom4([4]byte{198, 51, 100, byte(c)})
		start := randAt() / 2
		add(start, pktgen.TCP4(src, dst4, 40000, 443, pktgen.TCPSyn, 0), maps.WhyRule, 1, src, 443)
		for k := 1; k <= 40; k++ {
			add(start+time.Duration(k)*4*time.Millisecond, pktgen.TCP4(src, dst4, 40000, 443, pktgen.TCPAck|pktgen.TCPPsh, 100), maps.WhyRule, 2, src, 443)
		}
		// and some NTP, which no rule limits.
		for k := 0; k < 3; k++ {
			add(randAt(), pktgen.UDP4(src, dst4, 40000, 123, 48), maps.WhyUnmatched, -1, src, 123)
		}
	}
	// Our resolver answers: allowed, never limited.
	resolver := netip.MustParseAddr("192.0.2.53")
	for k := 0; k < 300; k++ {
		add(randAt(), pktgen.UDP4(resolver, dst4, 53, 33000, 200), maps.WhyAllow, -1, resolver, 33000)
	}
	// DNS amplification: 60 reflectors, 1 KB answers.
	for r := 0; r < 60; r++ {
		src := netip.AddrFrom4([4]byte{100, 64, byte(r / 10), byte(r)})
		for k := 0; k < 40; k++ {
			add(randAt(), pktgen.UDP4(src, dst4, 53, 33000, 1000), maps.WhyRule, 0, src, 33000)
		}
	}
	// A SYN flood from one /24, spoofed sources.
	for k := 0; k < 2000; k++ {
		src := netip.AddrFrom4([4]byte{45, 0, 0, byte(rng.IntN(256))})
		add(randAt(), pktgen.TCP4(src, dst4, uint16(1024+rng.IntN(60000)), 443, pktgen.TCPSyn, 0), maps.WhyRule, 1, src, 443)
	}
	// A denied network; and IPv6 SYNs to another port, under the tcp rule.
	denied := netip.MustParseAddr("203.0.113.9")
	for k := 0; k < 100; k++ {
		add(randAt(), pktgen.UDP4(denied, dst4, 1234, 80, 64), maps.WhyDeny, -1, denied, 80)
	}
	v6 := netip.MustParseAddr("2001:db8:77::5")
	for k := 0; k < 50; k++ {
		add(randAt(), pktgen.TCP6(v6, netip.MustParseAddr("2001:db8::1"), 50000, 22, pktgen.TCPSyn, 0), maps.WhyRule, 2, v6, 22)
	}
	// ARP, truncated IPv4 headers, and frames too short for Ethernet.
	for k := 0; k < 5; k++ {
		add(randAt(), arp(t), maps.WhyNonIP, -1, netip.Addr{}, 0)
	}
	for k := 0; k < 3; k++ {
		add(randAt(), pktgen.UDP4(netip.MustParseAddr("192.0.2.99"), dst4, 1, 2, 18)[:20], maps.WhyMalformed, -1, netip.Addr{}, 0)
	}
	for k := 0; k < 2; k++ {
		add(randAt(), make([]byte, 10), maps.WhyMalformed, -1, netip.Addr{}, 0)
	}
	slices.SortStableFunc(frames, func(a, b rec) int { return cmp.Compare(a.at, b.at) })
	return mixed{policy: p, rules: rules, frames: frames}
}

func arp(t *testing.T) []byte {
	buf := gopacket.NewSerializeBuffer()
	err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true},
		&layers.Ethernet{SrcMAC: pktgen.DefaultSrcMAC, DstMAC: net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, EthernetType: layers.EthernetTypeARP},
		&layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
			Operation: layers.ARPRequest, SourceHwAddress: pktgen.DefaultSrcMAC, SourceProtAddress: []byte{10, 0, 0, 2},
			DstHwAddress: make([]byte, 6), DstProtAddress: []byte{10, 0, 0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestMixedTraffic(t *testing.T) {
	mx := newMixed(t)
	for _, f := range []format{pcapNanos, pcapng} {
		t.Run(f.String(), func(t *testing.T) {
			want := expected(mx.policy, newModel(mx.rules...), mx.frames, 8)
			got := replayFile(t, mx.policy, writeCapture(t, f, mx.frames), Options{Top: 8})
			compare(t, got, want)
			// The legitimate clients' SYNs all passed; the flood's did not.
			for _, s := range got.Top {
				if s.Source.Is4() && s.Source.As4()[0] == 198 && s.Rule == "web-syn" {
					t.Errorf("a legitimate client's SYN was dropped: %+v", s)
				}
			}
		})
	}
}

// With mode: shadow nothing is dropped, deny included, and the would-drops
// are the drops of the enforcing policy.
func TestShadowMode(t *testing.T) {
	mx := newMixed(t)
	shadow := parsePolicy(t, "mode: shadow\n"+mixedPolicy)
	rules := slices.Clone(mx.rules)
	for i := range rules {
		rules[i].shadow = true
	}
	want := expected(shadow, newModel(rules...), mx.frames, 3)
	got := replayFile(t, shadow, writeCapture(t, pcapng, mx.frames), Options{Top: 3})
	compare(t, got, want)
	for _, r := range got.Rules {
		if r.Drop.Packets != 0 {
			t.Errorf("rule %s dropped %d packets in shadow mode", r.Name, r.Drop.Packets)
		}
	}
}

// With the datapath's sketch (TrackAfter 2) the replay still prints the
// same report every time: its thread stays on one CPU, whose sketch is the
// only one it touches. The sketch admits a source's first packet untracked,
// so it passes at least what exact tracking does.
func TestSketchReproducible(t *testing.T) {
	mx := newMixed(t)
	path := writeCapture(t, pcapng, mx.frames)
	exact := replayFile(t, mx.policy, path, Options{Top: 5})
	var outs []string
	var sketched *Report
	for range 2 {
		sketched = replayFile(t, mx.policy, path, Options{Top: 5, TrackAfter: 2})
		var b bytes.Buffer
		if err := sketched.Write(&b); err != nil {
			t.Fatal(err)
		}
		outs = append(outs, b.String())
	}
	if outs[0] != outs[1] {
		t.Errorf("two replays differ:\n%s\n---\n%s", outs[0], outs[1])
	}
	for i, r := range sketched.Rules {
		if r.Pass.Packets < exact.Rules[i].Pass.Packets {
			t.Errorf("rule %s: %d passed with the sketch, %d without", r.Name, r.Pass.Packets, exact.Rules[i].Pass.Packets)
		}
	}
	if !strings.Contains(outs[0], "sources tracked from their 2nd packet in a sketch epoch") {
		t.Errorf("the report does not say the sketch was on:\n%s", outs[0])
	}
}
