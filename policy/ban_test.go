// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"testing"
	"time"
)

func TestBans(t *testing.T) {
	wantBan := func(want Ban, action Action) func(t *testing.T, p *Policy) {
		return func(t *testing.T, p *Policy) {
			r := rule0(t, p)
			if r.Ban == nil || *r.Ban != want || r.Action != action {
				t.Fatalf("action %v ban %+v, want %v %+v", r.Action, r.Ban, action, want)
			}
		}
	}
	runParseCases(t, []parseCase{
		{name: "ban", src: withRule("action: ban", "ban: {for: 10m}"),
			check: wantBan(Ban{For: 10 * time.Minute, IPv4Prefix: 32, IPv6Prefix: 64}, ActionBan)},
		{name: "days and the key's prefix", src: withRule("action: ban", "ban: {for: 30d}", "key: {ipv4_prefix: 24, ipv6_prefix: 48}"),
			check: wantBan(Ban{For: 30 * 24 * time.Hour, IPv4Prefix: 24, IPv6Prefix: 48}, ActionBan)},
		{name: "global key bans the address", src: withRule("action: ban", "ban: {for: 1s}", "key: global"),
			check: wantBan(Ban{For: time.Second, IPv4Prefix: 32, IPv6Prefix: 128}, ActionBan)},
		{name: "shadow ban", src: withRule("action: shadow", "ban: {for: 1h}"),
			check: wantBan(Ban{For: time.Hour, IPv4Prefix: 32, IPv6Prefix: 64}, ActionShadow)},
		{name: "shadow mode keeps the ban", src: "mode: shadow\n" + withRule("action: ban", "ban: {for: 1h}"),
			check: wantBan(Ban{For: time.Hour, IPv4Prefix: 32, IPv6Prefix: 64}, ActionShadow)},
		{name: "ban without for", src: withRule("action: ban"), errs: []string{
			"p.yaml:2:5: rules[0]: action ban needs ban: {for: D}, e.g. ban: {for: 10m}"}},
		{name: "ban with drop", src: withRule("ban: {for: 1m}"), errs: []string{
			"p.yaml:4:5: rules[0].ban: ban: needs action: ban (or shadow, to record bans without enforcing them)"}},
		{name: "for missing", src: withRule("action: ban", "ban: {}"), errs: []string{
			"p.yaml:5:10: rules[0].ban: for is required, e.g. ban: {for: 10m}"}},
		{name: "too short", src: withRule("action: ban", "ban: {for: 500ms}"), errs: []string{
			"p.yaml:5:16: rules[0].ban.for: ban of 500ms is out of range; use 1s to 30d"}},
		{name: "too long", src: withRule("action: ban", "ban: {for: 31d}"), errs: []string{
			"p.yaml:5:16: rules[0].ban.for: ban of 31d is out of range; use 1s to 30d"}},
		{name: "not a duration", src: withRule("action: ban", "ban: {for: soon}"), errs: []string{
			`p.yaml:5:16: rules[0].ban.for: "soon" is not a duration; use Go durations like 30s, 10m or 12h, or days like 7d`}},
		{name: "unknown field", src: withRule("action: ban", "ban: {for: 1m, until: 2m}"), errs: []string{
			`p.yaml:5:20: rules[0].ban: unknown field "until"; allowed: for`}},
	})
}
