// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestTopLevel(t *testing.T) {
	runParseCases(t, []parseCase{
		{name: "minimal", src: "rules: []", check: func(t *testing.T, p *Policy) {
			if p.Mode != ModeEnforce || len(p.Rules) != 0 || p.Path != "p.yaml" || p.SHA256 == [32]byte{} {
				t.Fatalf("%+v", p)
			}
		}},
		{name: "version 1", src: "version: 1\nrules: []"},
		{name: "version quoted", src: "version: \"1\"\nrules: []"},
		{name: "version 2", src: "version: 2\nrules: []", errs: []string{
			`p.yaml:1:10: version: unsupported version "2"; this xdplimit reads version 1`}},
		{name: "version 1.0", src: "version: 1.0\nrules: []", errs: []string{
			`p.yaml:1:10: version: unsupported version "1.0"; this xdplimit reads version 1`}},
		{name: "mode enforce", src: "mode: enforce\n" + withRule("action: shadow"), check: func(t *testing.T, p *Policy) {
			if p.Mode != ModeEnforce || rule0(t, p).Action != ActionShadow {
				t.Fatalf("mode %v action %v", p.Mode, rule0(t, p).Action)
			}
		}},
		{name: "mode shadow forces shadow", src: "mode: shadow\n" + withRule("action: drop"), check: func(t *testing.T, p *Policy) {
			if p.Mode != ModeShadow || rule0(t, p).Action != ActionShadow {
				t.Fatalf("mode %v action %v", p.Mode, rule0(t, p).Action)
			}
		}},
		{name: "mode bad", src: "mode: dryrun\nrules: []", errs: []string{
			`p.yaml:1:7: mode: unknown mode "dryrun"; use enforce or shadow`}},
		{name: "mode list", src: "mode: [enforce]\nrules: []", errs: []string{
			`p.yaml:1:7: mode: expected enforce or shadow, got a list`}},
		{name: "unknown field", src: "rule: []\n", errs: []string{
			`p.yaml:1:1: unknown field "rule" (did you mean "rules"?); allowed: version, mode, defaults, rules, allow, deny, unparsed, fleet, log, bans, crowdsec, geoip, reject, conversations, capture, autopilot`}},
		{name: "x- fields ignored", src: "x-anything: {a: [1, 2]}\nrules: []"},
		{name: "empty file", src: "", errs: []string{
			"p.yaml:1:1: policy file is empty; a policy that limits nothing is `rules: []`"}},
		{name: "comments only", src: "# nothing\n", errs: []string{
			"p.yaml:1:1: policy file is empty; a policy that limits nothing is `rules: []`"}},
		{name: "not a mapping", src: "- rules\n", errs: []string{
			"p.yaml:1:1: expected a mapping with fields version, mode, defaults, rules, allow, deny, unparsed, fleet, log, bans, crowdsec, geoip, reject, conversations, capture, autopilot, got a list"}},
		{name: "two documents", src: "rules: []\n---\nrules: []\n", errs: []string{
			"p.yaml:3:1: a policy file holds one YAML document; this is a second one"}},
		{name: "syntax error", src: "rules: [\n", errs: []string{
			"p.yaml:1:8: sequence end token ']' not found"}},
		{name: "duplicate key", src: "rules: []\nrules: []\n", errs: []string{
			`p.yaml:2:1: mapping key "rules" already defined at [1:1]`}},
		{name: "tag", src: "mode: !!str enforce\nrules: []\n", errs: []string{
			"p.yaml:1:7: mode: YAML tags are not supported; quote the value if it starts with !"}},
		{name: "merge key", src: "x-d: &d {name: a}\nrules:\n  - <<: *d\n    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}\n", errs: []string{
			"p.yaml:3:5: rules[0]: merge keys (<<) are not supported; use defaults, or an alias for a whole value",
			"p.yaml:3:5: rules[0]: name is required"}},
		{name: "alias", src: "x-lim: &l {algorithm: token_bucket, rate: 1000/s, burst: 2000}\nrules:\n  - name: r\n    limit: *l\n",
			check: wantLevel(0, Level{Key: srcKey, Limit: tb1000})},
		{name: "alias errors point at the anchor", src: "x-lim: &l {algorithm: token_bucket, rate: 1000/sec, burst: 2000}\nrules:\n  - name: r\n    limit: *l\n", errs: []string{
			`p.yaml:1:43: rules[0].limit.rate: "1000/sec" ` + rateAdvice}},
		{name: "alias before anchor", src: "rules:\n  - name: r\n    limit: *l\nx-lim: &l {algorithm: token_bucket, rate: 1/s, burst: 1}\n", errs: []string{
			"p.yaml:3:12: rules[0].limit: alias *l names no anchor defined before it"}},
		{name: "deep nesting", src: "rules: " + strings.Repeat("[", 100) + strings.Repeat("]", 100), errs: []string{
			"p.yaml:1:72: nested more than 64 levels deep"}},
		{name: "rules not a list", src: "rules: {name: a}\n", errs: []string{
			`p.yaml:1:8: rules: expected a list of rules, got a mapping`}},
		{name: "too many rules", src: manyRules(maxRules + 1), errs: []string{
			fmt.Sprintf("p.yaml:%d:5: rules[256]: too many rules: the datapath holds at most 256", 2+3*256)}},
		{name: "256 rules", src: manyRules(maxRules)},
	})
}

// manyRules is a policy of n rules that do not shadow each other.
func manyRules(n int) string {
	var b strings.Builder
	b.WriteString("rules:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - name: r%d\n    match: {src_cidrs: [10.%d.%d.0/24]}\n    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}\n", i, i/256, i%256)
	}
	return b.String()
}

func TestRuleFields(t *testing.T) {
	runParseCases(t, []parseCase{
		{name: "defaults", src: withRule(), check: func(t *testing.T, p *Policy) {
			r := rule0(t, p)
			want := Rule{Name: "r", Line: 2, Match: anyMatch, Levels: []Level{{srcKey, tb1000}}, Action: ActionDrop}
			if !reflect.DeepEqual(r, want) {
				t.Fatalf("%+v, want %+v", r, want)
			}
		}},
		{name: "name missing", src: "rules:\n  - limit: {algorithm: token_bucket, rate: 1/s, burst: 1}\n", errs: []string{
			"p.yaml:2:5: rules[0]: name is required"}},
		{name: "name uppercase", src: "rules:\n  - name: DNS\n    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}\n", errs: []string{
			`p.yaml:2:11: rules[0].name: rule name "DNS" must be 1 to 63 characters of a-z, 0-9, _ and -`}},
		{name: "name too long", src: "rules:\n  - name: " + strings.Repeat("a", 64) + "\n    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}\n", errs: []string{
			`p.yaml:2:11: rules[0].name: rule name "` + strings.Repeat("a", 64) + `" must be 1 to 63 characters of a-z, 0-9, _ and -`}},
		{name: "name 63 and digits", src: "rules:\n  - name: " + strings.Repeat("a", 62) + "1\n    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}\n"},
		{name: "name numeric", src: "rules:\n  - name: 123\n    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}\n",
			check: func(t *testing.T, p *Policy) {
				if rule0(t, p).Name != "123" {
					t.Fatal(rule0(t, p).Name)
				}
			}},
		{name: "name mapping", src: "rules:\n  - name: {a: 1}\n    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}\n", errs: []string{
			"p.yaml:2:11: rules[0].name: expected a rule name, got a mapping"}},
		{name: "duplicate names", src: "rules:\n  - name: a\n    match: {protocol: tcp}\n    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}\n  - name: a\n    match: {protocol: udp}\n    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}\n", errs: []string{
			`p.yaml:5:11: rules[1].name: duplicate rule name "a" (first used on line 2)`}},
		{name: "limit missing", src: "rules:\n  - name: r\n", errs: []string{
			"p.yaml:2:5: rules[0]: limit is required, e.g. limit: {algorithm: token_bucket, rate: 1000/s, burst: 2000}"}},
		{name: "limit null", src: "rules:\n  - name: r\n    limit:\n", errs: []string{
			"p.yaml:2:5: rules[0]: limit is required, e.g. limit: {algorithm: token_bucket, rate: 1000/s, burst: 2000}"}},
		{name: "unknown rule field", src: withRule("actions: drop"), errs: []string{
			`p.yaml:4:5: rules[0]: unknown field "actions" (did you mean "action"?); allowed: name, match, key, limit, action, aggregate, ban`}},
		{name: "unknown field far from all", src: withRule("frobnicate: 1"), errs: []string{
			`p.yaml:4:5: rules[0]: unknown field "frobnicate"; allowed: name, match, key, limit, action, aggregate, ban`}},
		{name: "action drop", src: withRule("action: drop"), check: func(t *testing.T, p *Policy) {
			if rule0(t, p).Action != ActionDrop {
				t.Fatal(rule0(t, p).Action)
			}
		}},
		{name: "action shadow", src: withRule("action: shadow"), check: func(t *testing.T, p *Policy) {
			if rule0(t, p).Action != ActionShadow {
				t.Fatal(rule0(t, p).Action)
			}
		}},
		{name: "action bad", src: withRule("action: tarpit"), errs: []string{
			`p.yaml:4:13: rules[0].action: unknown action "tarpit"; use drop, shadow, ban, syncookie or reject`}},
		{name: "action syncookie", src: withRule("match: {protocol: tcp, dst_ports: [443], tcp_flags: [syn]}", "action: syncookie"),
			check: func(t *testing.T, p *Policy) {
				if rule0(t, p).Action != ActionSynCookie {
					t.Fatal(rule0(t, p).Action)
				}
			}},
		{name: "action syncookie, SYN and not ACK spelled out", src: withRule(`match: {protocol: tcp, tcp_flags: [syn, "!ack", "!fin"]}`, "action: syncookie"),
			check: func(t *testing.T, p *Policy) {
				if rule0(t, p).Action != ActionSynCookie {
					t.Fatal(rule0(t, p).Action)
				}
			}},
		{name: "action syncookie without tcp_flags", src: withRule("match: {protocol: tcp}", "action: syncookie"), errs: []string{
			"p.yaml:5:13: rules[0].action: action syncookie answers TCP SYNs: the rule needs match: {protocol: tcp, tcp_flags: [syn]}"}},
		{name: "action syncookie on SYN-ACKs", src: withRule("match: {protocol: tcp, tcp_flags: [syn, ack]}", "action: syncookie"), errs: []string{
			"p.yaml:5:13: rules[0].action: action syncookie answers TCP SYNs: the rule needs match: {protocol: tcp, tcp_flags: [syn]}"}},
		{name: "action syncookie on ACKs", src: withRule("match: {protocol: tcp, tcp_flags: [ack]}", "action: syncookie"), errs: []string{
			"p.yaml:5:13: rules[0].action: action syncookie answers TCP SYNs: the rule needs match: {protocol: tcp, tcp_flags: [syn]}"}},
		{name: "action syncookie on every protocol", src: withRule("action: syncookie"), errs: []string{
			"p.yaml:4:13: rules[0].action: action syncookie answers TCP SYNs: the rule needs match: {protocol: tcp, tcp_flags: [syn]}"}},
		{name: "defaults action syncookie on UDP", src: "defaults: {action: syncookie}\n" + withRule("match: {protocol: udp}"), errs: []string{
			"p.yaml:3:5: rules[0].action: action syncookie answers TCP SYNs: the rule needs match: {protocol: tcp, tcp_flags: [syn]}"}},
		{name: "action syncookie with a ban", src: withRule("match: {protocol: tcp, tcp_flags: [syn]}", "action: syncookie", "ban: {for: 1m}"), errs: []string{
			"p.yaml:6:5: rules[0].ban: ban: needs action: ban (or shadow, to record bans without enforcing them)"}},
		{name: "defaults action", src: "defaults: {action: shadow}\n" + withRule(), check: func(t *testing.T, p *Policy) {
			if rule0(t, p).Action != ActionShadow {
				t.Fatal(rule0(t, p).Action)
			}
		}},
		{name: "defaults action overridden", src: "defaults: {action: shadow}\n" + withRule("action: drop"), check: func(t *testing.T, p *Policy) {
			if rule0(t, p).Action != ActionDrop {
				t.Fatal(rule0(t, p).Action)
			}
		}},
		{name: "defaults unknown field", src: "defaults: {limit: 1}\nrules: []\n", errs: []string{
			`p.yaml:1:12: defaults: unknown field "limit"; allowed: key, action`}},
		{name: "defaults bad action", src: "defaults: {action: pass}\nrules: []\n", errs: []string{
			`p.yaml:1:20: defaults.action: unknown action "pass"; use drop, shadow, ban, syncookie or reject`}},
	})
}

func TestAllowDenyInline(t *testing.T) {
	runParseCases(t, []parseCase{
		{name: "lists", src: `allow: [192.0.2.0/24, "2001:db8::/32", 192.0.2.0/24, "::ffff:10.0.0.1"]
deny: {cidrs: [198.51.100.0/24]}
rules: []`, check: func(t *testing.T, p *Policy) {
			if want := pfx("10.0.0.1/32", "192.0.2.0/24", "2001:db8::/32"); !reflect.DeepEqual(p.Allow, want) {
				t.Fatalf("allow %v", p.Allow)
			}
			if want := pfx("198.51.100.0/24"); !reflect.DeepEqual(p.Deny, want) {
				t.Fatalf("deny %v", p.Deny)
			}
		}},
		{name: "same prefix in both", src: "allow: [10.0.0.0/8]\ndeny: [10.0.0.1/8]\n", errs: []string{
			"p.yaml:2:8: deny[0]: 10.0.0.0/8 is in both allow (p.yaml:1:9) and deny; remove it from one"}},
		{name: "deny inside allow", src: "allow: [10.0.0.0/8]\ndeny: [10.1.0.0/16, 10.1.2.0/24]\n", warns: []string{
			"p.yaml:2:8: deny[0]: deny 10.1.0.0/16 is inside allow 10.0.0.0/8 (p.yaml:1:9); the longest prefix decides, so 10.1.0.0/16 is denied",
			"p.yaml:2:21: deny[1]: deny 10.1.2.0/24 is inside allow 10.0.0.0/8 (p.yaml:1:9); the longest prefix decides, so 10.1.2.0/24 is denied"}},
		{name: "allow inside deny", src: "deny: [\"2001:db8::/32\"]\nallow: [\"2001:db8:1::/48\"]\n", warns: []string{
			"p.yaml:2:9: allow[0]: allow 2001:db8:1::/48 is inside deny 2001:db8::/32 (p.yaml:1:8); the longest prefix decides, so 2001:db8:1::/48 is allowed"}},
		{name: "hole in a hole", src: "deny: [10.0.0.0/8, 10.1.2.0/24]\nallow: [10.1.0.0/16]\n", warns: []string{
			"p.yaml:1:20: deny[1]: deny 10.1.2.0/24 is inside allow 10.1.0.0/16 (p.yaml:2:9); the longest prefix decides, so 10.1.2.0/24 is denied",
			"p.yaml:2:9: allow[0]: allow 10.1.0.0/16 is inside deny 10.0.0.0/8 (p.yaml:1:8); the longest prefix decides, so 10.1.0.0/16 is allowed"}},
		{name: "families do not overlap", src: "allow: [\"::/0\"]\ndeny: [0.0.0.0/0]\n"},
		{name: "bad entries", src: "allow: [10.0.0.0/8, nope]\ndeny: {cidrs: [x], hosts: [1.2.3.4]}\n", errs: []string{
			`p.yaml:1:21: allow[1]: "nope" is not an IP address or CIDR (like 192.0.2.0/24 or 2001:db8::/32)`,
			`p.yaml:2:16: deny.cidrs[0]: "x" is not an IP address or CIDR (like 192.0.2.0/24 or 2001:db8::/32)`,
			`p.yaml:2:20: deny: unknown field "hosts"; allowed: cidrs, files, countries, asns`}},
		{name: "allow a string", src: "allow: 10.0.0.0/8\n", errs: []string{
			`p.yaml:1:8: allow: expected a list of CIDRs or a mapping with cidrs, files, countries and asns, got "10.0.0.0/8"`}},
		{name: "host bits", src: "allow: [10.0.0.1/8]\n", warns: []string{
			"p.yaml:1:9: allow[0]: 10.0.0.1/8 is masked to 10.0.0.0/8"}},
	})
}

func TestUnparsedSection(t *testing.T) {
	for _, c := range []struct {
		yaml, want, err string
	}{
		{"rules: []\n", "pass, unlimited", ""},
		{"rules: []\nunparsed: {action: drop}\n", "drop", ""},
		{"rules: []\nunparsed: {limit: {algorithm: token_bucket, rate: 1000/s, burst: 100}}\n",
			"pass, limited to token_bucket 1000 pkt/s burst 100 (one global bucket)", ""},
		{"rules: []\nunparsed: {action: pass, limit: {algorithm: fixed_window, bytes: 1MB, window: 1s}}\n",
			"pass, limited to fixed_window 1000000 B per 1s (one global bucket)", ""},
		{"rules: []\nunparsed: {action: drop, limit: {algorithm: token_bucket, rate: 1/s, burst: 1}}\n", "",
			"p.yaml:2:26: unparsed.limit: a limit has no effect with action drop"},
		{"rules: []\nunparsed: {action: shadow}\n", "", `p.yaml:2:20: unparsed.action: unknown action "shadow"; use pass or drop`},
		{"rules: []\nunparsed: {limt: {}}\n", "", `p.yaml:2:12: unparsed: unknown field "limt"`},
	} {
		p, err := Parse("p.yaml", []byte(c.yaml))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: error %v, want %q", c.yaml, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.yaml, err)
			continue
		}
		if got := p.Unparsed.String(); got != c.want {
			t.Errorf("%q: %q, want %q", c.yaml, got, c.want)
		}
	}
}
