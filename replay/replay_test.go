// SPDX-License-Identifier: Apache-2.0

package replay

import (
	"cmp"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

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
