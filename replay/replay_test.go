package replay

import (
	"bytes"
	"cmp"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strconv"
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

// The tests build captures with pktgen frames at chosen times, write them
// with pcapgo, replay them through the real program, and compare what the
// program did with what the Go reference models (package model) say the
// policy's limits allow, computed here frame by frame, one model.State per
// key as the datapath keeps one entry per key. helpers_test.go writes and
// replays the captures; refmodel_test.go holds the models' side.

var dst4 = netip.MustParseAddr("10.0.0.1")

// A single source floods DNS at 20 kpps for half a second, with jitter,
// into a token bucket of 1000/s: the model admits the burst and the rate.
func TestSingleSourceFlood(t *testing.T) {
	p := parsePolicy(t, `
rules:
  - name: dns
    match: {protocol: udp, dst_ports: [53]}
    limit: {algorithm: token_bucket, rate: 1000/s, burst: 50}
`)
	m := newModel(mRule{name: "dns", levels: []mLevel{
		{params: tokenBucket(t, 1000, time.Second, 50, false), kind: policy.KeySrcIP, p4: 32, p6: 64},
	}})
	src := netip.MustParseAddr("198.51.100.7")
	rng := rand.New(rand.NewPCG(1, 2))
	var frames []rec
	at := time.Duration(0)
	for i := 0; i < 10000; i++ {
		frames = append(frames, rec{at: at, data: pktgen.UDP4(src, dst4, 4000, 53, 40+rng.IntN(400)), why: maps.WhyRule, rule: 0, src: src})
		at += time.Duration(25_000 + rng.IntN(50_000)) // 50 µs on average
	}
	for _, f := range []format{pcapNanos, pcapng} {
		t.Run(f.String(), func(t *testing.T) {
			m := newModel(m.rules...)
			want := expected(p, m, frames, 5)
			got := replayFile(t, p, writeCapture(t, f, frames), Options{Top: 5})
			compare(t, got, want)
			if got.Rules[0].Pass.Packets < 50 || got.Rules[0].Drop.Packets < 9000 {
				t.Errorf("the flood was not limited: %+v", got.Rules[0])
			}
		})
	}
}

// Microsecond pcap: the capture's own resolution is the clock's.
func TestMicrosecondPcap(t *testing.T) {
	p := parsePolicy(t, `
rules:
  - name: fw
    limit: {algorithm: fixed_window, packets: 7, window: 10ms}
`)
	m := newModel(mRule{name: "fw", levels: []mLevel{
		{params: window(t, model.AlgFixedWindow, 7, 10*time.Millisecond), kind: policy.KeySrcIP, p4: 32, p6: 64},
	}})
	src := netip.MustParseAddr("192.0.2.10")
	var frames []rec
	for i := 0; i < 3000; i++ {
		// Whole microseconds, which the file stores exactly.
		frames = append(frames, rec{at: time.Duration(i*37) * time.Microsecond, data: pktgen.UDP4(src, dst4, 1, 2, 18), why: maps.WhyRule, src: src})
	}
	compare(t, replayFile(t, p, writeCapture(t, pcapMicros, frames), Options{}), expected(p, m, frames, 0))
}

// An SSH brute force in a capture: sources opening connections to port
// 22 at random, some far faster than 5 per minute; the exact log admits
// what the model's log does, packet by packet.
func TestSlidingLogPcap(t *testing.T) {
	p := parsePolicy(t, `
rules:
  - name: ssh-syn
    match: {protocol: tcp, dst_ports: [22], tcp_flags: [syn]}
    limit: {algorithm: sliding_log, packets: 5, window: 1m}
`)
	params, err := model.SlidingLogParams(5, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	m := newModel(mRule{name: "ssh-syn", levels: []mLevel{{params: params, kind: policy.KeySrcIP, p4: 32, p6: 64}}})
	rng := rand.New(rand.NewPCG(5, 6))
	var frames []rec
	for i := 0; i < 20; i++ {
		src := netip.AddrFrom4([4]byte{203, 0, 113, byte(i)})
		gap := time.Duration(1+rng.IntN(30)) * time.Second // 2 to 60 a minute
		for at := time.Duration(rng.Int64N(int64(time.Minute))); at < 5*time.Minute; at += gap {
			frames = append(frames, rec{at: at, data: pktgen.TCP4(src, dst4, 40000+uint16(i), 22, pktgen.TCPSyn, 0), why: maps.WhyRule, src: src})
		}
	}
	slices.SortStableFunc(frames, func(a, b rec) int { return cmp.Compare(a.at, b.at) })
	got := replayFile(t, p, writeCapture(t, pcapNanos, frames), Options{})
	compare(t, got, expected(p, m, frames, 0))
	if got.Rules[0].Drop.Packets == 0 || got.Rules[0].Pass.Packets == 0 {
		t.Errorf("the brute force was not limited: %+v", got.Rules[0])
	}
}

// Thousands of sources, IPv4 and IPv6, each below its own limit or a
// little over it, together over their networks' and the global limits.
// Three algorithms on three levels, one of them counting bytes.
func TestManySourceFlood(t *testing.T) {
	p := parsePolicy(t, `
rules:
  - name: per-source
    match: {protocol: udp}
    key: {ipv4_prefix: 32, ipv6_prefix: 64}
    limit: {algorithm: token_bucket, rate: 5/s, burst: 3}
    aggregate:
      - key: {ipv4_prefix: 24, ipv6_prefix: 48}
        limit: {algorithm: fixed_window, packets: 100, window: 100ms}
      - key: global
        limit: {algorithm: sliding_window, bytes: 100000, window: 50ms}
`)
	rules := []mRule{{name: "per-source", levels: []mLevel{
		{params: tokenBucket(t, 5, time.Second, 3, false), kind: policy.KeySrcIP, p4: 32, p6: 64},
		{params: window(t, model.AlgFixedWindow, 100, 100*time.Millisecond), kind: policy.KeySrcIP, p4: 24, p6: 48},
		{params: window(t, model.AlgSlidingWindow, 100000, 50*time.Millisecond), bytes: true, kind: policy.KeyGlobal},
	}}}
	rng := rand.New(rand.NewPCG(3, 4))
	var frames []rec
	// send adds 2 to 7 packets from src at random times in [from, from+span).
	send := func(src netip.Addr, from, span time.Duration) {
		for k := 2 + rng.IntN(6); k > 0; k-- {
			at := from + time.Duration(rng.Int64N(int64(span)))
			var data []byte
			if src.Is4() {
				data = pktgen.UDP4(src, dst4, 53, 9, 18+rng.IntN(300))
			} else {
				data = pktgen.UDP6(src, netip.MustParseAddr("2001:db8::1"), 53, 9, 100+rng.IntN(300))
			}
			frames = append(frames, rec{at: at, data: data, why: maps.WhyRule, src: src})
		}
	}
	// First 150 ms: 2000 sources spread over 16 IPv4 /24s and 4 IPv6
	// /48s, which together exceed the global byte window.
	for i := 0; i < 2000; i++ {
		src := netip.AddrFrom4([4]byte{10, 1, byte(rng.IntN(16)), byte(i)})
		if i%5 == 4 {
			src = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, byte(rng.IntN(4)), 0, byte(rng.IntN(8)), 15: byte(i)})
		}
		send(src, 0, 150*time.Millisecond)
	}
	// Next 150 ms: 200 sources of one /24, over its window but within
	// the global one.
	for i := 0; i < 200; i++ {
		send(netip.AddrFrom4([4]byte{10, 1, 200, byte(i)}), 150*time.Millisecond, 150*time.Millisecond)
	}
	slices.SortStableFunc(frames, func(a, b rec) int { return cmp.Compare(a.at, b.at) })
	want := expected(p, newModel(rules...), frames, 10)
	got := replayFile(t, p, writeCapture(t, pcapngGzip, frames), Options{Top: 10})
	compare(t, got, want)
	// Each level must have refused something, or the test shows little.
	for i, n := range got.Rules[0].Refused {
		if n == 0 {
			t.Errorf("level %d refused nothing: %v", i, got.Rules[0].Refused)
		}
	}
}

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

// Explaining frames: the rule, the level and the key that decided each.
func TestExplain(t *testing.T) {
	mx := newMixed(t)
	m := newModel(mx.rules...)
	// Find, with the model, one frame of each kind worth explaining.
	pick := map[string]int{}
	for i, f := range mx.frames {
		kind := f.why.String()
		if f.why == maps.WhyRule {
			refused := m.judge(f.rule, f.src, f.port, clockOf(mx.frames, f), len(f.data))
			kind = mx.rules[f.rule].name + map[bool]string{true: " pass", false: " refused"}[refused < 0]
			if refused >= 0 {
				kind += " at " + []string{"own", "aggregate"}[min(refused, 1)]
			}
		}
		if _, ok := pick[kind]; !ok {
			pick[kind] = i + 1
		}
	}
	var numbers []int
	for _, n := range pick {
		numbers = append(numbers, n)
	}
	slices.Sort(numbers)
	got := replayFile(t, mx.policy, writeCapture(t, pcapng, mx.frames), Options{Explain: append(numbers, numbers[0])})
	if len(got.Explained) != len(numbers) {
		t.Fatalf("%d frames explained, want %d (a repeated number once)", len(got.Explained), len(numbers))
	}
	text := map[int]string{}
	for _, e := range got.Explained {
		text[e.Frame] = e.Text
	}
	line := func(i int) string { return strconv.Itoa(mx.policy.Rules[i].Line) }
	wants := map[string]func(f rec) string{
		"allow list": func(rec) string { return "allow list entry 192.0.2.53/32: pass" },
		"deny list":  func(rec) string { return "deny list entry 203.0.113.0/24: drop" },
		"unmatched":  func(rec) string { return "no rule matches: pass" },
		"non-IP":     func(rec) string { return "not IPv4 or IPv6: pass" },
		"malformed": func(f rec) string {
			if len(f.data) < ethHeaderLen {
				return "shorter than an Ethernet header: counted as malformed without running the program (which refuses it); the datapath passes malformed frames"
			}
			return "malformed (headers truncated or invalid): pass"
		},
		"dns-responses pass": func(f rec) string {
			return "rule dns-responses (#1, line " + line(0) + "), key src_ip " + f.src.String() + "/32: pass: within all 2 levels"
		},
		"dns-responses refused at own": func(f rec) string {
			return "rule dns-responses (#1, line " + line(0) + "), level 0 (own limit: token_bucket 20 pkt/s burst 10), key src_ip " + f.src.String() + "/32: drop"
		},
		"dns-responses refused at aggregate": func(f rec) string {
			return "rule dns-responses (#1, line " + line(0) + "), level 1 (aggregate[0]: token_bucket 2000000 B/s burst 50000), key global: drop"
		},
		"web-syn pass": func(f rec) string {
			return "rule web-syn (#2, line " + line(1) + "), key src_ip " + netip.PrefixFrom(f.src, 24).Masked().String() + ": pass: within its limit"
		},
		"web-syn refused at own": func(f rec) string {
			return "rule web-syn (#2, line " + line(1) + "), level 0 (own limit: fixed_window 20 pkt per 100ms), key src_ip 45.0.0.0/24: drop"
		},
		"tcp pass": func(f rec) string {
			return "rule tcp (#3, line " + line(2) + "), key src_ip+dst_port " + netip.PrefixFrom(f.src, map[bool]int{true: 32, false: 64}[f.src.Is4()]).Masked().String() + " port " + strconv.Itoa(int(f.port)) + ": pass: within its limit"
		},
		"tcp refused at own": func(f rec) string {
			return "rule tcp (#3, line " + line(2) + "), level 0 (own limit: sliding_window 30 pkt per 200ms), key src_ip+dst_port " + netip.PrefixFrom(f.src, map[bool]int{true: 32, false: 64}[f.src.Is4()]).Masked().String() + " port " + strconv.Itoa(int(f.port)) + ": shadow-drop (counted as a drop, passed)"
		},
	}
	for kind, n := range pick {
		w, ok := wants[kind]
		if !ok {
			t.Errorf("no expectation for %q (frame %d: %s)", kind, n, text[n])
			continue
		}
		if want := w(mx.frames[n-1]); text[n] != want {
			t.Errorf("frame %d (%s):\n got  %s\n want %s", n, kind, text[n], want)
		}
	}
	for kind := range wants {
		if _, ok := pick[kind]; !ok {
			t.Errorf("the capture has no frame of kind %q", kind)
		}
	}

	if _, err := RunFile(mx.policy, writeCapture(t, pcapng, mx.frames[:5]), Options{Explain: []int{6}}); err == nil ||
		!strings.Contains(err.Error(), "--explain 6: the capture has 5 frames") {
		t.Errorf("explaining a frame past the end: %v", err)
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
