// SPDX-License-Identifier: Apache-2.0

package replay

import (
	"cmp"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/model"
	"github.com/xdplimit/xdplimit/pktgen"
	"github.com/xdplimit/xdplimit/policy"
)

// The signature examples (examples/amplification.yaml, icmp-echo-flood.yaml,
// syn-fixed-ttl.yaml) replayed on captures of the floods they are written
// for, mixed with the legitimate traffic they must leave alone: each frame
// goes to the rule the test expects (or to none), and the verdicts agree
// with the reference models.

// modelOf states a policy's levels for the reference model.
func modelOf(t *testing.T, p *policy.Policy) *refModel {
	t.Helper()
	var rules []mRule
	for _, r := range p.Rules {
		mr := mRule{name: r.Name, shadow: r.Action == policy.ActionShadow}
		for _, l := range r.Levels {
			ml := mLevel{bytes: l.Limit.Unit == policy.Bytes, kind: l.Key.Kind, p4: l.Key.IPv4Prefix, p6: l.Key.IPv6Prefix}
			switch l.Limit.Algorithm {
			case policy.TokenBucket:
				ml.params = tokenBucket(t, l.Limit.Count, l.Limit.Per, l.Limit.Burst, ml.bytes)
			case policy.FixedWindow:
				ml.params = window(t, model.AlgFixedWindow, l.Limit.Count, l.Limit.Window)
			case policy.SlidingLog:
				p, err := model.SlidingLogParams(l.Limit.Count, l.Limit.Window)
				if err != nil {
					t.Fatal(err)
				}
				ml.params = p
			default:
				ml.params = window(t, model.AlgSlidingWindow, l.Limit.Count, l.Limit.Window)
			}
			mr.levels = append(mr.levels, ml)
		}
		rules = append(rules, mr)
	}
	return newModel(rules...)
}

func loadExample(t *testing.T, name string) *policy.Policy {
	t.Helper()
	p, err := policy.Load(filepath.Join("..", "examples", name))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// replayExample writes the frames, replays them, and compares with the
// model; it returns the report for the test's own checks.
func replayExample(t *testing.T, name string, frames []rec) *Report {
	t.Helper()
	p := loadExample(t, name)
	want := expected(p, modelOf(t, p), frames, 5)
	got := replayFile(t, p, writeCapture(t, pcapNanos, frames), Options{Top: 5})
	compare(t, got, want)
	return got
}

// every spaces n frames built by f evenly over d, starting at start.
func every(start, d time.Duration, n int, f func(i int) rec) []rec {
	out := make([]rec, n)
	for i := range out {
		out[i] = f(i)
		out[i].at = start + d*time.Duration(i)/time.Duration(n)
	}
	return out
}

func merge(parts ...[]rec) []rec {
	var out []rec
	for _, p := range parts {
		out = append(out, p...)
	}
	// By time, as a capture is written.
	slices.SortStableFunc(out, func(a, b rec) int { return cmp.Compare(a.at, b.at) })
	return out
}

func TestExampleAmplification(t *testing.T) {
	refl := netip.MustParseAddr("198.51.100.53")
	resolver := netip.MustParseAddr("192.0.2.53") // allowed in the policy
	big := func(sport uint16, payload int, rule int) func(int) rec {
		return func(int) rec {
			return rec{data: pktgen.UDP4(refl, dst4, sport, 33000, payload), why: maps.WhyRule, rule: rule, src: refl, port: sport}
		}
	}
	frames := merge(
		// 3000 DNS answers of 1200 bytes in 1 s from one reflector.
		every(0, time.Second, 3000, big(53, 1200, 0)),
		// Its plain 100-byte answers match no rule.
		every(0, time.Second, 50, func(int) rec {
			return rec{data: pktgen.UDP4(refl, dst4, 53, 33001, 100), why: maps.WhyUnmatched}
		}),
		// The same host's NTP monlist replies: a budget of their own.
		every(0, time.Second, 500, big(123, 440, 1)),
		// Time replies (48 bytes of NTP) are left alone.
		every(0, time.Second, 20, func(int) rec {
			return rec{data: pktgen.UDP4(refl, dst4, 123, 123, 48), why: maps.WhyUnmatched}
		}),
		every(0, time.Second, 200, big(11211, 1400, 2)),
		// Our own resolver's large answers are allowed.
		every(0, time.Second, 100, func(int) rec {
			return rec{data: pktgen.UDP4(resolver, dst4, 53, 33002, 1200), why: maps.WhyAllow, src: resolver}
		}),
	)
	got := replayExample(t, "amplification.yaml", frames)
	// policy test --explain says which field values matched, and the key's port.
	explainsFirst(t, "amplification.yaml", frames,
		" on length 1228, key src_ip+src_port 198.51.100.53/32 port 53: pass: within all 2 levels")
	for i, min := range []uint64{2800, 480, 180} {
		if r := got.Rules[i]; r.Drop.Packets < min {
			t.Errorf("rule %s dropped %d packets, want at least %d", r.Name, r.Drop.Packets, min)
		}
	}
}

func TestExampleICMPEchoFlood(t *testing.T) {
	src := netip.MustParseAddr("198.51.100.8")
	src6 := netip.MustParseAddr("2001:db8:5::8")
	dst6 := netip.MustParseAddr("2001:db8::1")
	icmp := func(s, d netip.Addr, m *pktgen.ICMPMessage, payload int) []byte {
		return pktgen.Frame{Src: s, Dst: d, Proto: pktgen.ProtoICMP, ICMP: m, Payload: payload}.MustBuild()
	}
	frames := merge(
		every(0, time.Second, 1000, func(int) rec {
			return rec{data: icmp(src, dst4, nil, 56), why: maps.WhyRule, rule: 1, src: src}
		}),
		every(0, time.Second, 300, func(int) rec {
			return rec{data: icmp(src, dst4, nil, 1400), why: maps.WhyRule, rule: 0, src: src}
		}),
		every(0, time.Second, 300, func(int) rec {
			return rec{data: icmp(src6, dst6, nil, 56), why: maps.WhyRule, rule: 2, src: src6}
		}),
		// Path MTU discovery and neighbour discovery are not limited.
		every(0, time.Second, 100, func(int) rec {
			return rec{data: icmp(src, dst4, &pktgen.ICMPMessage{Type: 3, Code: 4}, 28), why: maps.WhyUnmatched}
		}),
		every(0, time.Second, 100, func(int) rec {
			return rec{data: icmp(src6, dst6, &pktgen.ICMPMessage{Type: 135}, 24), why: maps.WhyUnmatched}
		}),
		every(0, time.Second, 100, func(int) rec {
			return rec{data: icmp(src, dst4, &pktgen.ICMPMessage{Type: 0}, 56), why: maps.WhyUnmatched}
		}),
	)
	got := replayExample(t, "icmp-echo-flood.yaml", frames)
	for i, min := range []uint64{230, 980, 280} {
		if r := got.Rules[i]; r.Drop.Packets < min {
			t.Errorf("rule %s dropped %d packets, want at least %d", r.Name, r.Drop.Packets, min)
		}
	}
}

func TestExampleUDPPayloadFlood(t *testing.T) {
	udp := func(src netip.Addr, sport uint16, data []byte) []byte {
		return pktgen.Frame{Src: src, Dst: dst4, SrcPort: sport, DstPort: 27015, Data: data}.MustBuild()
	}
	header := func(i int) []byte {
		// The tool's header, its last nibble varying, then random bytes.
		return append([]byte{0xff, 0xff, 0xff, 0xff, 0x54, 0x53, 0x6f, 0x70 | byte(i%16)}, byte(i), byte(i>>8), 0x11)
	}
	frames := merge(
		// Random sources and ports, one header.
		every(0, time.Second, 2000, func(i int) rec {
			src := netip.AddrFrom4([4]byte{203, 0, byte(113 + i/256), byte(i)})
			return rec{data: udp(src, uint16(1024+i), header(i)), why: maps.WhyRule, rule: 0, src: src}
		}),
		// Players: their own bytes, however similar (a different fifth byte).
		every(0, time.Second, 300, func(i int) rec {
			src := netip.AddrFrom4([4]byte{192, 0, 2, byte(i % 3)})
			return rec{data: udp(src, 27005, []byte{0xff, 0xff, 0xff, 0xff, 0x55, 0x53, 0x6f, 0x70}), why: maps.WhyRule, rule: 1, src: src}
		}),
	)
	got := replayExample(t, "udp-payload-flood.yaml", frames)
	if r := got.Rules[0]; r.Drop.Packets < 1800 {
		t.Errorf("the flood's header dropped %d of 2000, want at least 1800", r.Drop.Packets)
	}
	if r := got.Rules[1]; r.Drop.Packets != 0 {
		t.Errorf("players lost %d datagrams", r.Drop.Packets)
	}
	explainsFirst(t, "udp-payload-flood.yaml", frames, " on payload[0..7] ffffffff54536f70, key global: pass: within its limit")
}

// explainsFirst checks what policy test --explain says of the first of
// frames under example: decided by its first rule, named with its line,
// then tail.
func explainsFirst(t *testing.T, example string, frames []rec, tail string) {
	t.Helper()
	p := loadExample(t, example)
	ex := replayFile(t, p, writeCapture(t, pcapNanos, frames[:1]), Options{Explain: []int{1}})
	want := fmt.Sprintf("rule %s (#1, line %d)%s", p.Rules[0].Name, p.Rules[0].Line, tail)
	if len(ex.Explained) != 1 || ex.Explained[0].Text != want {
		t.Errorf("explained %+v\nwant %q", ex.Explained, want)
	}
}

func TestExampleSYNFixedTTL(t *testing.T) {
	syn := func(src netip.Addr, ttl uint8) []byte {
		return pktgen.Frame{Src: src, Dst: dst4, TTL: ttl, Proto: pktgen.ProtoTCP, SrcPort: 40000, DstPort: 443}.MustBuild()
	}
	frames := merge(
		// A spoofed flood: a new source per SYN, all arriving with TTL 252.
		every(0, time.Second, 2000, func(i int) rec {
			src := netip.AddrFrom4([4]byte{203, 0, byte(113 + i/256), byte(i)})
			return rec{data: syn(src, 252), why: maps.WhyRule, rule: 0, src: src}
		}),
		// Clients with ordinary TTLs get their per-source limit.
		every(0, time.Second, 200, func(i int) rec {
			src := netip.AddrFrom4([4]byte{192, 0, 2, byte(i % 4)})
			return rec{data: syn(src, byte(50+i%70)), why: maps.WhyRule, rule: 1, src: src}
		}),
	)
	got := replayExample(t, "syn-fixed-ttl.yaml", frames)
	if r := got.Rules[0]; r.Drop.Packets < 1800 {
		t.Errorf("the TTL-255 flood dropped %d of 2000, want at least 1800", r.Drop.Packets)
	}
	if r := got.Rules[1]; r.Drop.Packets != 0 {
		t.Errorf("clients lost %d SYNs", r.Drop.Packets)
	}
}
