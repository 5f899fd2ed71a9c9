// SPDX-License-Identifier: Apache-2.0

package metrics_test

import (
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/metrics"
)

func snap(at time.Duration, inserts uint64, rules ...maps.RuleStat) metrics.Snapshot {
	return metrics.Snapshot{
		Interface: "eth0",
		Time:      time.Unix(1700000000, 0).Add(at),
		Rules:     rules,
		Capacity:  1000,
		Counters: map[maps.Counter]maps.CounterValue{
			maps.CounterNewSource: {Packets: inserts},
			maps.CounterDeny:      {Packets: uint64(at / time.Millisecond), Bytes: 60 * uint64(at/time.Millisecond)},
		},
	}
}

func rule(name string, pass, drop uint64) maps.RuleStat {
	var r maps.RuleStat
	r.Name = name
	r.Verdicts[maps.VerdictPass] = maps.CounterValue{Packets: pass, Bytes: 100 * pass}
	r.Verdicts[maps.VerdictDrop] = maps.CounterValue{Packets: drop, Bytes: 100 * drop}
	return r
}

func TestRates(t *testing.T) {
	prev := snap(0, 900, rule("dns", 100, 1000), rule("gone", 5, 5), rule("reset", 500, 500))
	// Two seconds later: "new" appeared, "gone" went, "reset" was removed
	// and added again (its counters started over).
	cur := snap(2*time.Second, 1300, rule("dns", 300, 5000), rule("new", 10, 4), rule("reset", 6, 2))
	got := map[string]metrics.RuleRates{}
	var order []string
	for _, r := range metrics.Rates(prev, cur) {
		got[r.Rule] = r
		order = append(order, r.Rule)
	}
	if want := "dns new reset _allow _deny _unmatched _malformed _non_ip _ban _no_connection _no_socket _no_request"; strings.Join(order, " ") != want {
		t.Errorf("rows %v, want %s", order, want)
	}
	for _, c := range []struct {
		rule       string
		pass, drop float64
	}{
		{"dns", 100, 2000},
		{"new", 5, 2},
		{"reset", 3, 1},
		{"_deny", 0, 1000}, // 2000 in 2 s
	} {
		r := got[c.rule]
		if r.Rates[maps.VerdictPass].Packets != c.pass || r.Rates[maps.VerdictDrop].Packets != c.drop {
			t.Errorf("%s: pass %v/s drop %v/s, want %v and %v", c.rule,
				r.Rates[maps.VerdictPass].Packets, r.Rates[maps.VerdictDrop].Packets, c.pass, c.drop)
		}
	}
	if b := got["dns"].Rates[maps.VerdictDrop].Bytes; b != 200000 {
		t.Errorf("dns drop bytes/s %v, want 200000", b)
	}

	var out strings.Builder
	srcs := metrics.TopSources([]maps.DropSample{
		{Source: netip.MustParseAddr("192.0.2.1"), Slot: 3},
		{Source: netip.MustParseAddr("192.0.2.1"), Slot: 3},
		{Source: netip.MustParseAddr("192.0.2.1"), Slot: 3},
		{Source: netip.MustParseAddr("198.51.100.9"), Deny: true, Slot: 0xffff},
	}, map[uint32]string{3: "dns"}, metrics.TotalDrops(prev, cur), 2*time.Second, 10)
	if err := metrics.WriteTop(&out, prev, cur, 42, srcs); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	t.Log("\n" + text)
	for _, re := range []string{
		`xdplimit top eth0 .* interval 2\.00s  none mode, program 42`,
		`(?m)^ +dns +100 +2\.00k +0 +0 +0 +80\.0k +1\.60M +95\.2% +300 +5000 +0 +0 +0$`,
		`(?m)^ +_deny +0 +1\.00k +0 +0 +0 +0 +480k +100\.0% +0 +2000 +0 +0 +0$`,
		`(?m)^ +_allow +0 +0 +0 +0 +0 +0 +0 +- +0 +0 +0 +0 +0$`,
		`(?m)^ +total +108 +3\.00k `,
		`state table: ~1\.00k of 1\.00k entries \(100\.0%\), inserts 200/s, evictions ~150/s`,
		// 6006 drops over 2 s (dns 4000, new 4, reset 2, _deny 2000),
		// 4 samples: each stands for 750.75/s.
		`(?m)^ +192\.0\.2\.1 +dns +2\.25k +3$`,
		`(?m)^ +198\.51\.100\.9 +_deny +751 +1$`,
	} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("output does not match %s", re)
		}
	}
	if strings.Contains(text, "\x1b") {
		t.Error("escape sequence in the plain-text frame")
	}
}

// Names read from the pinned maps (the policy's path, the rules' names) and
// the interface's name reach the frame escaped: a name carrying a terminal
// escape or a newline neither acts on the operator's terminal nor forges a
// line of the frame.
func TestWriteTopEscapesNames(t *testing.T) {
	hostile := "dns\x1b]0;owned\x07\n   evil  1 2 3"
	prev := snap(0, 0, rule(hostile, 0, 0))
	cur := snap(time.Second, 0, rule(hostile, 10, 20))
	for _, s := range []*metrics.Snapshot{&prev, &cur} {
		s.Interface = "eth\x1b[2J0"
		s.Meta.PolicyPath = "/etc/p.yaml\r\x1b[1Apolicy /etc/forged.yaml"
	}
	srcs := metrics.TopSources([]maps.DropSample{{Source: netip.MustParseAddr("192.0.2.1"), Slot: 3}},
		map[uint32]string{3: hostile}, metrics.TotalDrops(prev, cur), time.Second, 10)
	var out strings.Builder
	if err := metrics.WriteTop(&out, prev, cur, 42, srcs); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	t.Log("\n" + text)
	if strings.ContainsAny(text, "\x1b\x07\r") {
		t.Error("a control character from a name reached the frame")
	}
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, "evil") && !strings.Contains(line, `dns\x1b]0;owned\x07\n   evil`) {
			t.Errorf("a name's newline forged a line of its own: %q", line)
		}
	}
	for _, want := range []string{`xdplimit top eth\x1b[2J0 `, `policy /etc/p.yaml\r\x1b[1Apolicy /etc/forged.yaml (sha256`} {
		if !strings.Contains(text, want) {
			t.Errorf("the frame lacks %s", want)
		}
	}
}
