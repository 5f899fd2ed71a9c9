// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"strings"
	"testing"
)

func TestLogSection(t *testing.T) {
	check := func(oneIn float64, perSec uint32, file string) func(*testing.T, *Policy) {
		return func(t *testing.T, p *Policy) {
			l := p.Log
			if !l.Set || l.SampleOneIn() != oneIn || l.RateCap() != perSec || !strings.HasSuffix(l.File, file) {
				t.Fatalf("log = %+v (one in %v, %d/s)", l, l.SampleOneIn(), l.RateCap())
			}
		}
	}
	runParseCases(t, []parseCase{
		{name: "absent", src: "rules: []\n", check: func(t *testing.T, p *Policy) {
			if p.Log.Set || p.Log.SampleOneIn() != DefaultLogOneIn || p.Log.RateCap() != DefaultLogMaxPerSecond {
				t.Fatalf("log = %+v", p.Log)
			}
		}},
		{name: "defaults", src: "log: {}\nrules: []\n", check: check(DefaultLogOneIn, DefaultLogMaxPerSecond, "")},
		{name: "fraction", src: "log: {sample: 1/100, max_per_second: 20, file: drops.jsonl}\nrules: []\n",
			check: check(100, 20, "drops.jsonl")},
		{name: "number", src: "log: {sample: 8}\nrules: []\n", check: check(8, DefaultLogMaxPerSecond, "")},
		{name: "percent", src: "log: {sample: 25%}\nrules: []\n", check: check(4, DefaultLogMaxPerSecond, "")},
		{name: "every drop", src: "log: {sample: 1}\nrules: []\n", check: check(1, DefaultLogMaxPerSecond, "")},

		{name: "zero", src: "log: {sample: 0}\nrules: []\n", errs: []string{
			`p.yaml:1:15: log.sample: sample "0": write one in N drops as 1/N or N (N from 1 to 16777216), or a share like 1%`}},
		{name: "not one in", src: "log: {sample: 3/100}\nrules: []\n", errs: []string{
			`p.yaml:1:15: log.sample: sample "3/100": write one in N drops as 1/N or N (N from 1 to 16777216), or a share like 1%`}},
		{name: "percent over 100", src: "log: {sample: 150%}\nrules: []\n", errs: []string{
			`p.yaml:1:15: log.sample: sample "150%": write one in N drops as 1/N or N (N from 1 to 16777216), or a share like 1%`}},
		{name: "cap zero", src: "log:\n  max_per_second: 0\nrules: []\n", errs: []string{
			`p.yaml:2:19: log.max_per_second: max_per_second "0": a whole number of lines from 1 to 100000`}},
		{name: "cap words", src: "log:\n  max_per_second: lots\nrules: []\n", errs: []string{
			`p.yaml:2:19: log.max_per_second: max_per_second "lots": a whole number of lines from 1 to 100000`}},
		{name: "unknown field", src: "log: {rate: 5}\nrules: []\n", errs: []string{
			`p.yaml:1:7: log: unknown field "rate"; allowed: sample, max_per_second, file`}},
		{name: "not a mapping", src: "log: yes\nrules: []\n", errs: []string{
			`p.yaml:1:6: log: expected a mapping with fields sample, max_per_second, file, got "yes"`}},
	})
}

// `policy check` prints the section, defaults applied.
func TestLogDescribe(t *testing.T) {
	p, err := Parse("/etc/xdplimit/p.yaml", []byte("log: {sample: 1%, file: drops.jsonl}\nrules: []\n"))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	p.Describe(&b)
	if want := "drop log: one in 100 drops, at most 100 lines/s to /etc/xdplimit/drops.jsonl\n"; !strings.Contains(b.String(), want) {
		t.Errorf("describe:\n%s\nwant a line %q", b.String(), want)
	}
}
