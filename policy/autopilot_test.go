// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestAutopilotSection(t *testing.T) {
	check := func(want *Autopilot) func(*testing.T, *Policy) {
		return func(t *testing.T, p *Policy) {
			if !reflect.DeepEqual(p.Autopilot, want) {
				t.Fatalf("autopilot = %+v, want %+v", p.Autopilot, want)
			}
		}
	}
	defaults := DefaultAutopilot()
	every := Autopilot{Mode: AutopilotShadow, Action: AutopilotLimit, OneIn: 256, Floor: 5000,
		Multiple: 2.5, Learning: 2 * time.Minute, Coverage: 0.9, BaselineMax: 0.01, MaxRules: 32,
		Expire: 5 * time.Minute}
	fractions := DefaultAutopilot()
	fractions.OneIn, fractions.Coverage, fractions.BaselineMax = 64, 1, 0
	edges := DefaultAutopilot()
	edges.OneIn, edges.Floor, edges.Multiple, edges.Learning = 1, 1, 1.5, 0
	edges.Coverage, edges.BaselineMax, edges.MaxRules, edges.Expire = 0.5, 0.1, 1, time.Second
	perMinute := DefaultAutopilot()
	perMinute.Floor = 2000
	runParseCases(t, []parseCase{
		{name: "absent: off", src: "rules: []\n", check: check(nil)},
		{name: "defaults", src: "autopilot: {}\nrules: []\n", check: check(&defaults)},
		{name: "null: absent, off", src: "autopilot:\nrules: []\n", check: check(nil)},
		{name: "every field", src: `autopilot:
  mode: shadow
  action: limit
  sample: 1/256
  floor: 5k/s
  multiple: 2.5
  learning: 2m
  coverage: 90%
  baseline_max: 1%
  max_rules: 32
  expire: 5m
rules: []
`, check: check(&every)},
		{name: "fractions, and a sample rounded down", src: "autopilot: {sample: 1/100, coverage: 1, baseline_max: 0}\nrules: []\n",
			check: check(&fractions)},
		{name: "the edges", src: "autopilot: {sample: 100%, floor: 1/s, multiple: 1.5, learning: 0s, coverage: 0.5, " +
			"baseline_max: 10%, max_rules: 1, expire: 1s}\nrules: []\n", check: check(&edges)},
		{name: "a floor per minute", src: "autopilot: {floor: 120k/m}\nrules: []\n", check: check(&perMinute)},
		{name: "policy shadow leaves the autopilot's mode", src: "mode: shadow\nautopilot: {}\nrules: []\n",
			check: check(&defaults)},

		{name: "bad mode", src: "autopilot: {mode: dry-run}\nrules: []\n", errs: []string{
			`p.yaml:1:19: autopilot.mode: unknown mode "dry-run"; use enforce or shadow`}},
		{name: "coverage out of range", src: "autopilot: {coverage: 40%}\nrules: []\n", errs: []string{
			`p.yaml:1:23: autopilot.coverage: coverage "40%": a share from 50% to 100%, like 95% or 0.95`}},
		{name: "byte-rate floor", src: "autopilot: {floor: 1MB/s}\nrules: []\n", errs: []string{
			"p.yaml:1:20: autopilot.floor: floor 1MB/s counts bytes; give packets per second, like 1000/s"}},
	})
}

// TestAutopilotBounds: each field's bounds, refused with what it takes.
// The broken fixtures of TestAutopilotSection already show the commands
// refusing the section; these are the decoder's own messages.
func TestAutopilotBounds(t *testing.T) {
	for _, c := range []struct{ field, value, msg string }{
		{"mode", "[enforce]", `autopilot.mode: expected enforce or shadow, got a list`},
		{"action", "ban", `autopilot.action: unknown action "ban"; use drop or limit`},
		{"sample", "1/100000", `autopilot.sample: sample "1/100000": write one in N packets as 1/N or N (N from 1 to 65536), or a share like 1.5%`},
		{"sample", "0", `autopilot.sample: sample "0": write one in N packets as 1/N or N (N from 1 to 65536), or a share like 1.5%`},
		{"floor", "1000", `autopilot.floor: "1000" is not a rate; use N/s, N/m, N/h or a byte rate like 8Mbit/s`},
		{"floor", "30/m", `autopilot.floor: floor 30/m: give 1/s to 100000000/s`},
		{"floor", "200M/s", `autopilot.floor: floor 200M/s: give 1/s to 100000000/s`},
		{"floor", "8Mbit/s", `autopilot.floor: floor 8Mbit/s counts bytes; give packets per second, like 1000/s`},
		{"multiple", "1", `autopilot.multiple: multiple "1": a number from 1.5 to 10000`},
		{"multiple", "20000", `autopilot.multiple: multiple "20000": a number from 1.5 to 10000`},
		{"multiple", "1e3", `autopilot.multiple: multiple "1e3": a number from 1.5 to 10000`},
		{"learning", "25h", `autopilot.learning: learning must be 0s to 24h0m0s, got 25h`},
		{"learning", "-1s", `autopilot.learning: learning must be 0s to 24h0m0s, got -1s`},
		{"learning", "soon", `autopilot.learning: expected a duration like 30s, got "soon"`},
		{"coverage", "1.5", `autopilot.coverage: coverage "1.5": a share from 50% to 100%, like 95% or 0.95`},
		{"coverage", "101%", `autopilot.coverage: coverage "101%": a share from 50% to 100%, like 95% or 0.95`},
		{"coverage", "most", `autopilot.coverage: coverage "most": a share from 50% to 100%, like 95% or 0.95`},
		{"baseline_max", "20%", `autopilot.baseline_max: baseline_max "20%": a share from 0% to 10%, like 0.1% or 0.001`},
		{"baseline_max", "-1%", `autopilot.baseline_max: baseline_max "-1%": a share from 0% to 10%, like 0.1% or 0.001`},
		{"max_rules", "0", `autopilot.max_rules: max_rules "0": a whole number of rules from 1 to 32`},
		{"max_rules", "33", `autopilot.max_rules: max_rules "33": a whole number of rules from 1 to 32`},
		{"expire", "500ms", `autopilot.expire: expire must be 1s to 24h0m0s, got 500ms`},
		{"expire", "48h", `autopilot.expire: expire must be 1s to 24h0m0s, got 48h`},
	} {
		src := "autopilot:\n  " + c.field + ": " + c.value + "\nrules: []\n"
		want := fmt.Sprintf("p.yaml:2:%d: %s", len(c.field)+5, c.msg)
		_, err := Parse("p.yaml", []byte(src))
		if got := errorLines(err); len(got) != 1 || got[0] != want {
			t.Errorf("%s: %s:\n%s\nwant:\n%s", c.field, c.value, strings.Join(got, "\n"), want)
		}
	}
	_, err := Parse("p.yaml", []byte("autopilot: {samples: 1/64}\nrules: []\n"))
	want := `p.yaml:1:13: autopilot: unknown field "samples" (did you mean "sample"?); allowed: ` +
		"mode, action, sample, floor, multiple, learning, coverage, baseline_max, max_rules, expire"
	if got := errorLines(err); len(got) != 1 || got[0] != want {
		t.Errorf("unknown field:\n%s\nwant:\n%s", strings.Join(got, "\n"), want)
	}
}

// `policy check` prints the section on one line.
func TestAutopilotDescribe(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"autopilot: {}\n", "autopilot: enforce, action drop (rules hold what they match to 1 packet/s); " +
			"an attack is over 1000 packets/s to one destination and 10 times its baseline, after 30s learning; " +
			"samples one in 64 packets; a rule's fingerprint matches 95% of the attack and at most 0.1% of the baseline; " +
			"up to 8 rules, each removed once its attack stays below the threshold for 1m\n"},
		{"autopilot: {mode: shadow, action: limit}\n", "autopilot: shadow, action limit (rules have action shadow: " +
			"nothing dropped, what they would hold to the destination's baseline counted); "},
	} {
		p, err := Parse("p.yaml", []byte(c.src+"rules: []\n"))
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		p.Describe(&b)
		if !strings.Contains(b.String(), c.want) {
			t.Errorf("describe:\n%s\nwant %q", b.String(), c.want)
		}
	}
}
