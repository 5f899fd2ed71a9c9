// SPDX-License-Identifier: Apache-2.0

package maps_test

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

const sourcePolicy = `
allow: [192.0.2.0/28]
deny: [198.51.100.0/24]
rules:
  - name: icmp
    match: {protocol: icmp}
    limit: {algorithm: token_bucket, rate: 10/s, burst: 5}
  - name: lan
    match: {src_cidrs: [10.0.0.0/8]}
    key: {ipv4_prefix: 24}
    limit: {algorithm: fixed_window, packets: 3, window: 1s}
    aggregate:
      - key: global
        limit: {algorithm: token_bucket, rate: 1000/s, burst: 1000}
  - name: dns
    match: {protocol: udp, dst_ports: [53]}
    key: src_ip+dst_port
    limit: {algorithm: sliding_log, packets: 4, window: 1s}
  - name: web
    match: {protocol: tcp, dst_ports: [80]}
    limit: {algorithm: sliding_window, packets: 10, window: 1s}
    action: reject
`

func ruleNames(s maps.Source) []string {
	var n []string
	for _, r := range s.Rules {
		n = append(n, r.Name)
	}
	return n
}

func sourceOf(t *testing.T, l *maps.Limiter, addr string, port uint16) maps.Source {
	t.Helper()
	s, err := l.Source(netip.MustParseAddr(addr), port)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSourceMatch: which lists, bans and rules an address meets, as far as
// the address decides.
func TestSourceMatch(t *testing.T) {
	l := loadWith(t, maps.Options{Clock: maps.ClockMap, TrackAfter: 1}, sourcePolicy)
	if err := l.SetClock(uint64(t0)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		addr  string
		list  string
		rules []string
	}{
		{"10.1.2.3", "", []string{"icmp", "lan", "dns", "web"}},
		{"203.0.113.9", "", []string{"icmp", "dns", "web"}},
		{"2001:db8::1", "", []string{"dns", "web"}},
		{"::ffff:10.1.2.3", "", []string{"icmp", "lan", "dns", "web"}},
		{"192.0.2.1", maps.SourceAllowed, []string{"icmp", "dns", "web"}},
		{"198.51.100.7", maps.SourceDenied, []string{"icmp", "dns", "web"}},
	} {
		s := sourceOf(t, l, c.addr, 0)
		if s.List != c.list || !slices.Equal(ruleNames(s), c.rules) {
			t.Errorf("%s: list %q, rules %v; want %q, %v", c.addr, s.List, ruleNames(s), c.list, c.rules)
		}
		if want := []string{"protocol", "dst_ports"}; !slices.Equal(s.Undecided, want) {
			t.Errorf("%s: undecided %v, want %v", c.addr, s.Undecided, want)
		}
	}

	for _, b := range []string{"10.0.0.0/8", "10.1.2.0/24", "10.1.3.0/24"} {
		if _, err := l.Ban(netip.MustParsePrefix(b), time.Minute, "test "+b); err != nil {
			t.Fatal(err)
		}
	}
	var bans []string
	for _, b := range sourceOf(t, l, "10.1.2.3", 0).Bans {
		bans = append(bans, fmt.Sprintf("%v %s %v", b.Prefix, b.Reason, b.Left))
	}
	if want := []string{"10.1.2.0/24 test 10.1.2.0/24 1m0s", "10.0.0.0/8 test 10.0.0.0/8 1m0s"}; !slices.Equal(bans, want) {
		t.Errorf("bans %v, want %v", bans, want)
	}
}

// TestSourceLevels: each level's key, its state and what it allows, as the
// packets sent left them.
func TestSourceLevels(t *testing.T) {
	l := loadWith(t, maps.Options{Clock: maps.ClockMap, TrackAfter: 1}, sourcePolicy)
	udp := func(src string, port uint16) []byte {
		return pktgen.Frame{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr("10.0.0.1"), SrcPort: 4000,
			DstPort: port, Payload: 10}.MustBuild()
	}
	// Two packets from 10.1.2.3 (rule lan), one from 10.1.2.4 (same /24),
	// three to port 53 from 203.0.113.9 (rule dns).
	for _, f := range []struct {
		frame []byte
		at    time.Duration
	}{
		{udp("10.1.2.3", 9), t0}, {udp("10.1.2.3", 9), t0 + 100*time.Millisecond},
		{udp("10.1.2.4", 9), t0 + 200*time.Millisecond},
		{udp("203.0.113.9", 53), t0}, {udp("203.0.113.9", 53), t0 + 100*time.Millisecond},
		{udp("203.0.113.9", 53), t0 + 200*time.Millisecond},
	} {
		runOut(t, l, f.frame, f.at)
	}
	now := t0 + 300*time.Millisecond
	if err := l.SetClock(uint64(now)); err != nil {
		t.Fatal(err)
	}
	level := func(s maps.Source, rule string, origin int) maps.SourceLevel {
		t.Helper()
		for _, r := range s.Rules {
			if r.Name == rule && origin < len(r.Levels) {
				return r.Levels[origin]
			}
		}
		t.Fatalf("no level %d of rule %s in %+v", origin, rule, s)
		return maps.SourceLevel{}
	}
	lan := sourceOf(t, l, "10.1.2.9", 0)
	own, agg := level(lan, "lan", 0), level(lan, "lan", 1)
	// Fixed windows of 1 s aligned on the clock: the window of t0 ends at
	// t0 + 1 s, 700 ms from now.
	if own.Key != "src_ip" || own.Prefix != netip.MustParsePrefix("10.1.2.0/24") || own.Algorithm != "fixed_window" ||
		!own.Known || !own.Tracked || own.Limit != 3 || own.Remaining != 0 ||
		own.RetryAfter != uint64(700*time.Millisecond) || own.Reset != uint64(700*time.Millisecond) {
		t.Errorf("lan's own level: %+v", own)
	}
	// The global bucket: 3 packets taken out of 1000, at 1 ms each, the
	// last at +200 ms: whole again at +203 ms... long since.
	if agg.Key != "global" || agg.Prefix.IsValid() || !agg.Tracked || agg.Limit != 1000 || agg.Remaining != 1000 ||
		agg.Reset != 0 {
		t.Errorf("lan's aggregate: %+v", agg)
	}
	if r := lan.Rules[1]; r.Name != "lan" || r.Action != "drop" || r.Index != 1 {
		t.Errorf("rule %+v", r)
	}

	dns := sourceOf(t, l, "203.0.113.9", 0)
	if lv := level(dns, "dns", 0); lv.Known || lv.Key != "src_ip+dst_port" {
		t.Errorf("dns without a port: %+v", lv)
	}
	dns = sourceOf(t, l, "203.0.113.9", 53)
	// 3 of 4 in the last second; the first leaves the log at t0 + 1 s.
	if lv := level(dns, "dns", 0); !lv.Known || !lv.Tracked || lv.Algorithm != "sliding_log" || lv.Limit != 4 ||
		lv.Remaining != 1 || lv.RetryAfter != 0 || lv.Reset != uint64(900*time.Millisecond) {
		t.Errorf("dns at port 53: %+v", lv)
	}
	if r := dns.Rules[len(dns.Rules)-1]; r.Name != "web" || r.Action != "reject" {
		t.Errorf("rule %+v", r)
	}
	// A key the table does not hold reads as a fresh one.
	if lv := level(sourceOf(t, l, "10.9.9.9", 0), "lan", 0); !lv.Known || lv.Tracked || lv.Remaining != 3 || lv.Sketch {
		t.Errorf("an unseen /24: %+v", lv)
	}
}

// TestSourceSketch: with the admission sketch on, a source that sent one
// packet has no state entry yet, and its level says the sketch counts it.
func TestSourceSketch(t *testing.T) {
	testutil.PinCPU(t, 0) // the sketch is per CPU
	l := loadWith(t, maps.Options{Clock: maps.ClockMap}, `
rules:
  - name: big
    limit: {algorithm: token_bucket, rate: 100000/s, burst: 100000}
`)
	runOut(t, l, udp4("10.1.2.3").MustBuild(), t0)
	lv := sourceOf(t, l, "10.1.2.3", 0).Rules[0].Levels[0]
	if !lv.Known || lv.Tracked || !lv.Sketch || lv.Remaining != lv.Limit {
		t.Errorf("after one packet: %+v", lv)
	}
	runOut(t, l, udp4("10.1.2.3").MustBuild(), t0)
	lv = sourceOf(t, l, "10.1.2.3", 0).Rules[0].Levels[0]
	// The packet the sketch let through is not charged (levels.h).
	if !lv.Tracked || lv.Remaining != lv.Limit-1 {
		t.Errorf("after two packets: %+v", lv)
	}
}

// TestSourceReload: what Source keeps of a generation (its rules, the
// protocols' bitmaps) is read again once a reload put another in force.
func TestSourceReload(t *testing.T) {
	l := loadWith(t, maps.Options{Clock: maps.ClockMap, TrackAfter: 1}, sourcePolicy)
	if got := ruleNames(sourceOf(t, l, "2001:db8::1", 0)); !slices.Equal(got, []string{"dns", "web"}) {
		t.Fatalf("rules %v", got)
	}
	if err := l.Apply(xdpltest.Compile(t, `
rules:
  - name: v6-icmp
    match: {protocol: icmpv6}
    limit: {algorithm: token_bucket, rate: 10/s, burst: 5}
  - name: v4-icmp
    match: {protocol: icmp}
    limit: {algorithm: token_bucket, rate: 10/s, burst: 5}
`)); err != nil {
		t.Fatal(err)
	}
	if got := ruleNames(sourceOf(t, l, "2001:db8::1", 0)); !slices.Equal(got, []string{"v6-icmp"}) {
		t.Errorf("after the reload: rules %v, want [v6-icmp]", got)
	}
}
