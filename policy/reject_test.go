// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"strings"
	"testing"
	"time"
)

func TestRejectSection(t *testing.T) {
	want := func(count uint64, per time.Duration, burst uint64, set bool) func(*testing.T, *Policy) {
		return func(t *testing.T, p *Policy) {
			b := p.Reject.Budget
			if b.Algorithm != TokenBucket || b.Unit != Packets || b.Count != count || b.Per != per || b.Burst != burst ||
				p.Reject.Set != set {
				t.Fatalf("reject = %+v, want %d per %v, burst %d, set %v", p.Reject, count, per, burst, set)
			}
		}
	}
	rule := withRule("action: reject")
	runParseCases(t, []parseCase{
		{name: "absent", src: "rules: []\n", check: want(1000, time.Second, 50, false)},
		{name: "empty", src: "reject: {}\n" + rule, check: want(1000, time.Second, 50, true)},
		{name: "budget", src: "reject: {budget: 200/s}\n" + rule, check: want(200, time.Second, 10, true)},
		{name: "budget and burst", src: "reject: {budget: 6000/m, burst: 3}\n" + rule, check: want(100, time.Second, 3, true)},
		{name: "a slow budget", src: "reject: {budget: 10/s}\n" + rule, check: want(10, time.Second, 1, true)},
		{name: "no reject rule", src: "reject: {budget: 10/s}\n" + withRule(), check: want(10, time.Second, 1, true),
			warns: []string{"p.yaml:1:1: reject: no rule has action reject: the section has no effect"}},
		{name: "no reject rule in shadow", src: "mode: shadow\nreject: {budget: 10/s}\n" + rule},

		{name: "bytes", src: "reject: {budget: 1MB/s}\n" + rule, errs: []string{
			"p.yaml:1:18: reject.budget: budget 1MB/s counts bytes; give answers (packets) per second, like 1000/s"}},
		{name: "too many", src: "reject: {budget: 2M/s}\n" + rule, errs: []string{
			"p.yaml:1:18: reject.budget: budget 2M/s is above 1000000 answers a second"}},
		{name: "zero", src: "reject: {budget: 0/s}\n" + rule, errs: []string{
			"p.yaml:1:18: reject.budget: rate must be greater than zero; to drop all traffic from an address, use deny"}},
		{name: "zero burst", src: "reject: {burst: 0}\n" + rule, errs: []string{
			"p.yaml:1:17: reject.burst: burst must be 1 to 1000000 answers, got 0"}},
		{name: "unknown field", src: "reject: {per_source: 1/s}\n" + rule, errs: []string{
			`p.yaml:1:10: reject: unknown field "per_source"; allowed: budget, burst`}},
	})
}

func TestActionReject(t *testing.T) {
	runParseCases(t, []parseCase{
		{name: "any protocol", src: withRule("action: reject"), check: func(t *testing.T, p *Policy) {
			if rule0(t, p).Action != ActionReject {
				t.Fatal(rule0(t, p).Action)
			}
		}},
		{name: "with a ban", src: withRule("action: reject", "ban: {for: 1m}"), errs: []string{
			"p.yaml:5:5: rules[0].ban: ban: needs action: ban (or shadow, to record bans without enforcing them)"}},
	})
	p, err := Parse("p.yaml", []byte("reject: {budget: 200/s, burst: 7}\n"+withRule("action: reject")))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	p.Describe(&b)
	for _, line := range []string{"over limit: reject\n", "answers with a TCP reset, or an ICMP unreachable",
		"answers of reject rules: at most 200/s (burst 7) for every reject rule together, and one a second per source\n"} {
		if !strings.Contains(b.String(), line) {
			t.Errorf("Describe:\n%s\nwant %q", b.String(), line)
		}
	}
}
