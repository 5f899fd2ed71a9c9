// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"strings"
	"testing"
)

// matchOf parses a match given as the body of a flow mapping.
func matchOf(t *testing.T, body string) Match {
	t.Helper()
	p, err := Parse("p.yaml", []byte(withMatch(body)))
	if err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	return p.Rules[0].Match
}

func TestCovers(t *testing.T) {
	for _, tc := range []struct {
		earlier, later string
		covers         bool
	}{
		// An absent dimension covers anything on it.
		{"", "", true},
		{"", "protocol: udp, dst_ports: [53]", true},
		{"protocol: udp", "", false},
		{"protocol: udp", "protocol: udp, dst_ports: [53]", true},
		{"protocol: udp", "protocol: tcp", false},
		{"protocol: any", "protocol: icmp", true},

		// Ports: ranges, unions, the whole range.
		{"protocol: udp, dst_ports: [1-100]", "protocol: udp, dst_ports: [53, 80-90]", true},
		{"protocol: udp, dst_ports: [1-100]", "protocol: udp, dst_ports: [53, 80-101]", false},
		{"protocol: udp, dst_ports: [1-50, 51-100]", "protocol: udp, dst_ports: [40-60]", true},
		{"protocol: udp, dst_ports: [0-65535]", "protocol: udp", true},
		{"protocol: udp, dst_ports: [1-65535]", "protocol: udp", false},
		{"protocol: udp, dst_ports: [53]", "protocol: udp, src_ports: [53]", false},
		{"protocol: udp, src_ports: [53]", "protocol: udp, src_ports: [53], dst_ports: [1024-65535]", true},

		// CIDRs: containment, unions that tile, families.
		{"src_cidrs: [10.0.0.0/8]", "src_cidrs: [10.1.0.0/16, 10.2.3.4]", true},
		{"src_cidrs: [10.0.0.0/8]", "src_cidrs: [10.1.0.0/16, 11.0.0.0/16]", false},
		{"src_cidrs: [10.0.0.0/9, 10.128.0.0/9]", "src_cidrs: [10.0.0.0/8]", true},
		{"src_cidrs: [10.0.0.0/9, 10.128.0.0/10]", "src_cidrs: [10.0.0.0/8]", false},
		{"src_cidrs: [10.0.0.0/9, 10.0.0.0/10, 10.128.0.0/9]", "src_cidrs: [10.0.0.0/8]", true},
		{"src_cidrs: [0.0.0.0/0]", "", false},
		{`src_cidrs: [0.0.0.0/0, "::/0"]`, "", true},
		{"src_cidrs: [0.0.0.0/0]", "dst_cidrs: [192.0.2.0/24]", true}, // later only matches IPv4
		{"src_cidrs: [0.0.0.0/0]", "protocol: icmp", true},
		{`src_cidrs: ["::/0"]`, "protocol: icmp", false},
		{`src_cidrs: ["::/0"]`, "protocol: icmpv6", true},
		{`src_cidrs: ["::/1", "8000::/1"]`, `src_cidrs: ["2001:db8::/32"]`, true},
		{"dst_cidrs: [192.0.2.0/24]", "src_cidrs: [192.0.2.0/24]", false},
		{"src_cidrs: [10.0.0.0/8]", `protocol: icmp, src_cidrs: [10.0.0.0/8, "::/0"]`, true}, // ::/0 cannot match icmp

		// TCP flags: fewer requirements cover more packets.
		{"protocol: tcp", "protocol: tcp, tcp_flags: [syn]", true},
		{"protocol: tcp, tcp_flags: [syn]", "protocol: tcp", false},
		{"protocol: tcp, tcp_flags: [syn]", "protocol: tcp, tcp_flags: [syn, ece]", true},
		{"protocol: tcp, tcp_flags: [syn]", "protocol: tcp, tcp_flags: [syn, ack]", false},
		{`protocol: tcp, tcp_flags: ["!rst"]`, "protocol: tcp, tcp_flags: [syn]", false},
		{`protocol: tcp, tcp_flags: ["!ack"]`, "protocol: tcp, tcp_flags: [syn]", true},
		{"protocol: tcp, tcp_flags: [ack]", `protocol: tcp, tcp_flags: [ack, "!fin"]`, true},

		// VLANs: absent includes untagged packets.
		{"vlan: [100, 200]", "vlan: [100]", true},
		{"vlan: [100]", "vlan: [100, 200]", false},
		{"vlan: [100]", "", false},
		{"", "vlan: [100]", true},

		// Signature fields: ranges like ports, dscp and tos by the TOS
		// bytes they admit, icmp types and codes as ranges.
		{"length: 0-1500", "length: 100-200", true},
		{"length: 100-200", "length: 0-1500", false},
		{"length: 100-200", "", false},
		{"ttl: [64, 128]", "ttl: 64", true},
		{"dscp: [46]", "tos: [184-187]", true}, // 184..187 >> 2 is 46
		{"dscp: [46]", "tos: [184-188]", false},
		{"tos: [0-255]", "dscp: [1]", true},
		{"protocol: icmp, icmp: {type: 8}", "protocol: icmp, icmp: {type: 8, code: 0}", true},
		{"protocol: icmp, icmp: {type: 8, code: 0}", "protocol: icmp, icmp: {type: 8}", false},
		{"protocol: icmp, icmp: {type: 8}", "protocol: icmp", false},
		{"protocol: icmp", "protocol: icmp, icmp: {type: 0}", true},
		{"protocol: icmp, icmp: {type: [0, 8]}", "protocol: icmp, icmp: {type: 8, code: [0-3]}", true},
		{"protocol: icmp, icmp: {type: [0, 8]}", "protocol: icmp, icmp: {type: [0, 3]}", false},
		{"protocol: icmp, icmp: {code: [0-3, 13]}", "protocol: icmp, icmp: {type: 3, code: [1, 13]}", true},
		{"protocol: icmp, icmp: {code: [0-3, 13]}", "protocol: icmp, icmp: {code: [3-4]}", false},
		{"protocol: icmp, icmp: {type: [0-255]}", "protocol: icmp, icmp: {type: echo-request}", true},

		// Every dimension must cover.
		{"protocol: udp, vlan: [1]", "protocol: udp, vlan: [1], src_cidrs: [10.0.0.0/8]", true},
		{"protocol: udp, vlan: [1], src_cidrs: [10.0.0.0/8]", "protocol: udp, vlan: [1]", false},
	} {
		a, b := matchOf(t, tc.earlier), matchOf(t, tc.later)
		if got := covers(a, b); got != tc.covers {
			t.Errorf("covers({%s}, {%s}) = %v, want %v", tc.earlier, tc.later, got, tc.covers)
		}
	}
}

// twoRules is a policy whose rules a and b have the given matches.
func twoRules(a, b string) string {
	const lim = "    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}\n"
	return "rules:\n  - name: a\n    match: {" + a + "}\n" + lim + "  - name: b\n    match: {" + b + "}\n" + lim
}

func TestShadowedRules(t *testing.T) {
	runParseCases(t, []parseCase{
		{name: "narrower first is fine", src: twoRules("protocol: udp, dst_ports: [53]", "protocol: udp")},
		{name: "catch-all first", src: twoRules("", "protocol: udp"), errs: []string{
			`p.yaml:5:5: rules[1]: rule "b" can never apply: rule "a" (line 2) comes first and matches every packet it matches`}},
		{name: "identical", src: twoRules("protocol: tcp, tcp_flags: [syn]", "protocol: tcp, tcp_flags: [syn]"), errs: []string{
			`p.yaml:5:5: rules[1]: rule "b" can never apply: rule "a" (line 2) comes first and matches every packet it matches`}},
		{name: "union of cidrs", src: twoRules("src_cidrs: [10.0.0.0/9, 10.128.0.0/9]", "src_cidrs: [10.0.0.0/8]"), errs: []string{
			`p.yaml:5:5: rules[1]: rule "b" can never apply: rule "a" (line 2) comes first and matches every packet it matches`}},
		{name: "action does not matter", src: strings.Replace(twoRules("", ""), "  - name: a\n", "  - name: a\n    action: shadow\n", 1), errs: []string{
			`p.yaml:6:5: rules[1]: rule "b" can never apply: rule "a" (line 2) comes first and matches every packet it matches`}},
		{name: "a rule that never matches is not reported as shadowed",
			src:   twoRules("", `protocol: icmp, src_cidrs: ["::/0"]`),
			warns: []string{`p.yaml:6:29: rules[1].match.src_cidrs: rule never matches: every src_cidrs entry is IPv6, but protocol icmp is IPv4 only`}},
		{name: "first shadowing rule named", src: "rules:\n" +
			"  - name: a\n    match: {protocol: tcp}\n    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}\n" +
			"  - name: b\n    match: {protocol: udp}\n    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}\n" +
			"  - name: c\n    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}\n" +
			"  - name: d\n    match: {protocol: udp, dst_ports: [53]}\n    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}\n" +
			"  - name: e\n    match: {protocol: icmp}\n    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}\n",
			errs: []string{
				`p.yaml:10:5: rules[3]: rule "d" can never apply: rule "b" (line 5) comes first and matches every packet it matches`,
				`p.yaml:13:5: rules[4]: rule "e" can never apply: rule "c" (line 8) comes first and matches every packet it matches`}},
		{name: "rules with errors are not compared", src: twoRules("protocol: tcpp", ""), errs: []string{
			`p.yaml:3:23: rules[0].match.protocol: unknown protocol "tcpp"; use tcp, udp, icmp, icmpv6 or any`}},
	})
}

func TestCoveredBy(t *testing.T) {
	for _, tc := range []struct {
		p    string
		set  []string
		want bool
	}{
		{"10.0.0.0/8", []string{"0.0.0.0/0"}, true},
		{"10.0.0.0/8", []string{"::/0"}, false},
		{"10.0.0.0/8", nil, false},
		{"10.0.0.0/8", []string{"10.0.0.0/9", "10.128.0.0/9"}, true},
		{"10.0.0.0/8", []string{"10.0.0.0/9", "10.128.0.0/10", "10.192.0.0/10"}, true},
		{"10.0.0.0/8", []string{"10.0.0.0/9", "10.0.0.0/9", "10.128.0.0/10"}, false},
		{"::/0", []string{"::/1", "8000::/1"}, true},
		{"::/0", []string{"::/1", "8000::/2"}, false},
		{"192.0.2.1/32", []string{"192.0.2.0/31"}, true},
	} {
		if got := coveredBy(pfx(tc.p)[0], pfx(tc.set...)); got != tc.want {
			t.Errorf("coveredBy(%s, %v) = %v", tc.p, tc.set, got)
		}
	}
}
