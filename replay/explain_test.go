// SPDX-License-Identifier: Apache-2.0

package replay

// Explaining frames (--explain): the text for each kind of decision, on the
// mixed capture of mixed_test.go.

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/xdplimit/xdplimit/maps"
)

// Explaining frames: the rule, the level and the key that decided each.
func TestExplain(t *testing.T) {
	mx := newMixed(t)
	pick := oneOfEachKind(mx)
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

// oneOfEachKind finds, with the model, the first frame of each kind worth
// explaining: what decided it, and for a rule's frame whether it passed or
// which level refused it. It returns frame numbers (1-based) by kind.
func oneOfEachKind(mx mixed) map[string]int {
	m := newModel(mx.rules...)
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
	return pick
}
