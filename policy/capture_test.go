// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"strings"
	"testing"
)

func TestCaptureSection(t *testing.T) {
	check := func(oneIn uint32, asked float64) func(*testing.T, *Policy) {
		return func(t *testing.T, p *Policy) {
			if p.Capture.OneIn != oneIn || p.Capture.Asked != asked {
				t.Fatalf("capture = %+v, want one in %d (asked %v)", p.Capture, oneIn, asked)
			}
		}
	}
	runParseCases(t, []parseCase{
		{name: "absent: off", src: "rules: []\n", check: check(0, 0)},
		{name: "defaults", src: "capture: {}\nrules: []\n", check: check(DefaultCaptureOneIn, DefaultCaptureOneIn)},
		{name: "a power of two", src: "capture: {sample: 1/4096}\nrules: []\n", check: check(4096, 4096)},
		{name: "rounded down to one", src: "capture: {sample: 1/1000}\nrules: []\n", check: check(512, 1000)},
		{name: "percent", src: "capture: {sample: 10%}\nrules: []\n", check: check(8, 10)},
		{name: "every packet", src: "capture: {sample: 1}\nrules: []\n", check: check(1, 1)},

		{name: "rarer than the bound", src: "capture: {sample: 1/100000}\nrules: []\n", errs: []string{
			`p.yaml:1:19: capture.sample: sample "1/100000": write one in N packets as 1/N or N (N from 1 to 65536), or a share like 0.1%`}},
		{name: "not one in", src: "capture: {sample: often}\nrules: []\n", errs: []string{
			`p.yaml:1:19: capture.sample: sample "often": write one in N packets as 1/N or N (N from 1 to 65536), or a share like 0.1%`}},
		{name: "unknown field", src: "capture: {rate: 5}\nrules: []\n", errs: []string{
			`p.yaml:1:11: capture: unknown field "rate"; allowed: sample`}},
	})
}

// `policy check` prints the section, and what the datapath does of an N
// that is not a power of two.
func TestCaptureDescribe(t *testing.T) {
	p, err := Parse("p.yaml", []byte("capture: {sample: 1/1000}\nrules: []\n"))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	p.Describe(&b)
	want := "capture: one in 512 packets of every verdict (asked: one in 1000; the datapath samples one in a power of two)\n"
	if !strings.Contains(b.String(), want) {
		t.Errorf("describe:\n%s\nwant a line %q", b.String(), want)
	}
}
