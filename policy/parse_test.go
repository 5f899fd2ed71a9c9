package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
)

// parseCase is one policy text and everything Parse must say about it.
type parseCase struct {
	name  string
	src   string
	errs  []string // exact messages in order; none means the policy must load
	warns []string // exact warnings in order, for policies that load
	check func(t *testing.T, p *Policy)
}

func runParseCases(t *testing.T, cases []parseCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.errs) > 0 {
				checkBrokenFixture(t, tc.src)
			}
			p, err := Parse("p.yaml", []byte(tc.src))
			if got := errorLines(err); !reflect.DeepEqual(got, tc.errs) {
				t.Fatalf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.errs, "\n"))
			}
			if err != nil {
				if p != nil {
					t.Fatal("Parse returned a Policy with errors")
				}
				return
			}
			var warns []string
			for _, w := range p.Warnings {
				warns = append(warns, w.String())
			}
			if !reflect.DeepEqual(warns, tc.warns) {
				t.Fatalf("warnings:\n%s\nwant:\n%s", strings.Join(warns, "\n"), strings.Join(tc.warns, "\n"))
			}
			if tc.check != nil {
				tc.check(t, p)
			}
		})
	}
}

func errorLines(err error) []string {
	if err == nil {
		return nil
	}
	var list ErrorList
	if !errors.As(err, &list) {
		return []string{"not an ErrorList: " + err.Error()}
	}
	lines := make([]string, len(list))
	for i, e := range list {
		lines[i] = e.Error()
	}
	return lines
}

// withRule is a policy of one rule named r with a valid limit, plus the
// given lines; those start on line 4, column 5.
func withRule(lines ...string) string {
	return "rules:\n  - name: r\n    limit: {algorithm: token_bucket, rate: 1000/s, burst: 2000}\n    " +
		strings.Join(lines, "\n    ") + "\n"
}

// withMatch is a policy of one rule whose match is the given flow mapping
// body, which starts on line 3, column 13.
func withMatch(body string) string {
	return "rules:\n  - name: r\n    match: {" + body + "}\n    limit: {algorithm: token_bucket, rate: 1000/s, burst: 2000}\n"
}

// withLimit is a policy of one rule whose limit is the given flow mapping
// body, which starts on line 3, column 13.
func withLimit(body string) string {
	return "rules:\n  - name: r\n    limit: {" + body + "}\n"
}

func rule0(t *testing.T, p *Policy) Rule {
	t.Helper()
	if len(p.Rules) == 0 {
		t.Fatal("no rules")
	}
	return p.Rules[0]
}

func wantMatch(want Match) func(*testing.T, *Policy) {
	return func(t *testing.T, p *Policy) {
		if got := rule0(t, p).Match; !reflect.DeepEqual(got, want) {
			t.Fatalf("match %+v, want %+v", got, want)
		}
	}
}

func wantLevel(i int, want Level) func(*testing.T, *Policy) {
	return func(t *testing.T, p *Policy) {
		r := rule0(t, p)
		if i >= len(r.Levels) {
			t.Fatalf("%d levels", len(r.Levels))
		}
		if got := r.Levels[i]; got != want {
			t.Fatalf("level %d: %+v, want %+v", i, got, want)
		}
	}
}

var (
	tb1000     = Limit{Algorithm: TokenBucket, Unit: Packets, Count: 1000, Per: time.Second, Burst: 2000}
	srcKey     = Key{Kind: KeySrcIP, IPv4Prefix: 32, IPv6Prefix: 64}
	anyMatch   = Match{Protocol: ProtoAny}
	rateAdvice = "is not a rate; use N/s, N/m, N/h or a byte rate like 8Mbit/s"
)

func pfx(s ...string) []netip.Prefix {
	var ps []netip.Prefix
	for _, x := range s {
		ps = append(ps, netip.MustParsePrefix(x))
	}
	return ps
}

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
			`p.yaml:1:1: unknown field "rule" (did you mean "rules"?); allowed: version, mode, defaults, rules, allow, deny, unparsed, fleet, log`}},
		{name: "x- fields ignored", src: "x-anything: {a: [1, 2]}\nrules: []"},
		{name: "empty file", src: "", errs: []string{
			"p.yaml:1:1: policy file is empty; a policy that limits nothing is `rules: []`"}},
		{name: "comments only", src: "# nothing\n", errs: []string{
			"p.yaml:1:1: policy file is empty; a policy that limits nothing is `rules: []`"}},
		{name: "not a mapping", src: "- rules\n", errs: []string{
			"p.yaml:1:1: expected a mapping with fields version, mode, defaults, rules, allow, deny, unparsed, fleet, log, got a list"}},
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
		{name: "action bad", src: withRule("action: reject"), errs: []string{
			`p.yaml:4:13: rules[0].action: unknown action "reject"; use drop, shadow or ban`}},
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
			`p.yaml:1:20: defaults.action: unknown action "pass"; use drop, shadow or ban`}},
	})
}

func TestMatchFields(t *testing.T) {
	runParseCases(t, []parseCase{
		{name: "empty match", src: withMatch(""), check: wantMatch(anyMatch)},
		{name: "protocol tcp", src: withMatch("protocol: tcp"), check: wantMatch(Match{Protocol: ProtoTCP})},
		{name: "protocol udp", src: withMatch("protocol: udp"), check: wantMatch(Match{Protocol: ProtoUDP})},
		{name: "protocol icmp", src: withMatch("protocol: icmp"), check: wantMatch(Match{Protocol: ProtoICMP})},
		{name: "protocol icmpv6", src: withMatch("protocol: icmpv6"), check: wantMatch(Match{Protocol: ProtoICMPv6})},
		{name: "protocol any", src: withMatch("protocol: any"), check: wantMatch(anyMatch)},
		{name: "protocol bad", src: withMatch("protocol: sctp"), errs: []string{
			`p.yaml:3:23: rules[0].match.protocol: unknown protocol "sctp"; use tcp, udp, icmp, icmpv6 or any`}},
		{name: "protocol number", src: withMatch("protocol: 6"), errs: []string{
			`p.yaml:3:23: rules[0].match.protocol: unknown protocol "6"; use tcp, udp, icmp, icmpv6 or any`}},
		{name: "protocol uppercase", src: withMatch("protocol: TCP"), errs: []string{
			`p.yaml:3:23: rules[0].match.protocol: unknown protocol "TCP"; use tcp, udp, icmp, icmpv6 or any`}},
		{name: "unknown match field", src: withMatch("dst_port: [53]"), errs: []string{
			`p.yaml:3:13: rules[0].match: unknown field "dst_port" (did you mean "dst_ports"?); allowed: protocol, dst_ports, src_ports, src_cidrs, dst_cidrs, tcp_flags, vlan, length, ttl, dscp, tos, icmp`}},
		{name: "match not a mapping", src: "rules:\n  - name: r\n    match: udp\n    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}\n", errs: []string{
			`p.yaml:3:12: rules[0].match: expected a mapping with fields protocol, dst_ports, src_ports, src_cidrs, dst_cidrs, tcp_flags, vlan, length, ttl, dscp, tos, icmp, got "udp"`}},

		// Ports.
		{name: "ports", src: withMatch("protocol: udp, dst_ports: [53, \"123\", 1024-65535, 0], src_ports: [10-20, 15-30, 31, 5]"),
			check: wantMatch(Match{Protocol: ProtoUDP,
				DstPorts: []PortRange{{0, 0}, {53, 53}, {123, 123}, {1024, 65535}},
				SrcPorts: []PortRange{{5, 5}, {10, 31}}})},
		{name: "ports block list", src: "rules:\n  - name: r\n    match:\n      protocol: tcp\n      dst_ports:\n        - 80\n        - 443\n    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}\n",
			check: wantMatch(Match{Protocol: ProtoTCP, DstPorts: []PortRange{{80, 80}, {443, 443}}})},
		{name: "ports bad", src: withMatch("protocol: tcp, dst_ports: [70000, 9-3, abc, -1, 1-2-3, 65536-65536]"), errs: []string{
			`p.yaml:3:40: rules[0].match.dst_ports[0]: "70000" is out of range; ports are 0 to 65535`,
			`p.yaml:3:47: rules[0].match.dst_ports[1]: "9-3" is an empty range; write the lower port first`,
			`p.yaml:3:52: rules[0].match.dst_ports[2]: "abc" is not a port or range; use N or LO-HI with ports 0 to 65535`,
			`p.yaml:3:57: rules[0].match.dst_ports[3]: "-1" is not a port or range; use N or LO-HI with ports 0 to 65535`,
			`p.yaml:3:61: rules[0].match.dst_ports[4]: "1-2-3" is not a port or range; use N or LO-HI with ports 0 to 65535`,
			`p.yaml:3:68: rules[0].match.dst_ports[5]: "65536-65536" is out of range; ports are 0 to 65535`}},
		{name: "ports scalar", src: withMatch("protocol: tcp, dst_ports: 53"), errs: []string{
			`p.yaml:3:39: rules[0].match.dst_ports: expected a list like [53, 1024-65535], got 53`}},
		{name: "ports empty", src: withMatch("protocol: tcp, dst_ports: []"), errs: []string{
			`p.yaml:3:39: rules[0].match.dst_ports: empty list; leave the field out instead`}},
		{name: "ports without protocol", src: withMatch("dst_ports: [53]"), errs: []string{
			`p.yaml:3:13: rules[0].match.dst_ports: dst_ports needs protocol tcp or udp (protocol is any)`}},
		{name: "src ports with icmp", src: withMatch("protocol: icmp, src_ports: [53]"), errs: []string{
			`p.yaml:3:29: rules[0].match.src_ports: src_ports needs protocol tcp or udp (protocol is icmp)`}},

		// CIDRs.
		{name: "cidrs", src: withMatch(`src_cidrs: [10.0.0.0/8, 192.0.2.7, "2001:db8::/32", "::ffff:198.51.100.0/120", 10.0.0.0/8], dst_cidrs: ["::1"]`),
			check: wantMatch(Match{Protocol: ProtoAny,
				SrcCIDRs: pfx("10.0.0.0/8", "192.0.2.7/32", "198.51.100.0/24", "2001:db8::/32"),
				DstCIDRs: pfx("::1/128")})},
		{name: "cidr host bits", src: withMatch("src_cidrs: [192.0.2.1/24]"), warns: []string{
			"p.yaml:3:25: rules[0].match.src_cidrs[0]: 192.0.2.1/24 is masked to 192.0.2.0/24"},
			check: wantMatch(Match{Protocol: ProtoAny, SrcCIDRs: pfx("192.0.2.0/24")})},
		{name: "cidrs bad", src: withMatch(`src_cidrs: [1.2.3, 10.0.0.0/33, "fe80::1%eth0", [1]]`), errs: []string{
			`p.yaml:3:25: rules[0].match.src_cidrs[0]: "1.2.3" is not an IP address or CIDR (like 192.0.2.0/24 or 2001:db8::/32)`,
			`p.yaml:3:32: rules[0].match.src_cidrs[1]: "10.0.0.0/33" is not an IP address or CIDR (like 192.0.2.0/24 or 2001:db8::/32)`,
			`p.yaml:3:45: rules[0].match.src_cidrs[2]: "fe80::1%eth0" has an IPv6 zone; zones are not allowed`,
			`p.yaml:3:61: rules[0].match.src_cidrs[3]: expected a CIDR, got a list`}},
		{name: "ipv6 unquoted in flow mapping", src: withMatch("dst_cidrs: [2001:db8::1]"), errs: []string{
			`p.yaml:3:25: rules[0].match.dst_cidrs[0]: expected a CIDR, got a mapping; write IPv6 addresses inside {...} in quotes, like "2001:db8::/32"`}},
		{name: "ipv6 unquoted in flow mapping syntax", src: withMatch("dst_cidrs: [::1]"), errs: []string{
			`p.yaml:3:25: found an invalid key for this map (quote IPv6 addresses inside {...}, as in "::1": YAML reads their colons as key separators)`}},
		{name: "ipv6 unquoted in block", src: "rules:\n  - name: r\n    match:\n      src_cidrs: [2001:db8::/32, ::/0]\n    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}\n",
			check: wantMatch(Match{Protocol: ProtoAny, SrcCIDRs: pfx("::/0", "2001:db8::/32")})},
		{name: "icmp with ipv6 sources", src: withMatch(`protocol: icmp, src_cidrs: ["::/0"]`), warns: []string{
			"p.yaml:3:29: rules[0].match.src_cidrs: rule never matches: every src_cidrs entry is IPv6, but protocol icmp is IPv4 only"}},
		{name: "icmpv6 with ipv4 destinations", src: withMatch(`protocol: icmpv6, dst_cidrs: [10.0.0.0/8]`), warns: []string{
			"p.yaml:3:31: rules[0].match.dst_cidrs: rule never matches: every dst_cidrs entry is IPv4, but protocol icmpv6 is IPv6 only"}},
		{name: "icmp with a dead ipv6 entry", src: withMatch(`protocol: icmp, src_cidrs: [10.0.0.0/8, "::/0"]`), warns: []string{
			"p.yaml:3:29: rules[0].match.src_cidrs: ::/0 never matches: protocol icmp is IPv4 only"}},
		{name: "src v4 dst v6", src: withMatch(`src_cidrs: [10.0.0.0/8], dst_cidrs: ["::/0"]`), warns: []string{
			"p.yaml:3:38: rules[0].match.dst_cidrs: rule never matches: src_cidrs are all IPv4 and dst_cidrs all IPv6"}},

		// TCP flags.
		{name: "flags syn", src: withMatch("protocol: tcp, tcp_flags: [syn]"),
			check: wantMatch(Match{Protocol: ProtoTCP, TCPFlags: &TCPFlags{Set: TCPFlagSYN, Clear: TCPFlagACK}})},
		{name: "flags syn !ack", src: withMatch(`protocol: tcp, tcp_flags: [syn, "!ack"]`),
			check: wantMatch(Match{Protocol: ProtoTCP, TCPFlags: &TCPFlags{Set: TCPFlagSYN, Clear: TCPFlagACK}})},
		{name: "flags syn ack", src: withMatch("protocol: tcp, tcp_flags: [syn, ack]"),
			check: wantMatch(Match{Protocol: ProtoTCP, TCPFlags: &TCPFlags{Set: TCPFlagSYN | TCPFlagACK}})},
		{name: "flags syn fin", src: withMatch("protocol: tcp, tcp_flags: [syn, fin]"),
			check: wantMatch(Match{Protocol: ProtoTCP, TCPFlags: &TCPFlags{Set: TCPFlagSYN | TCPFlagFIN, Clear: TCPFlagACK}})},
		{name: "flags ack", src: withMatch("protocol: tcp, tcp_flags: [ack]"),
			check: wantMatch(Match{Protocol: ProtoTCP, TCPFlags: &TCPFlags{Set: TCPFlagACK}})},
		{name: "flags all names", src: withMatch(`protocol: tcp, tcp_flags: [fin, "!syn", rst, psh, ack, urg, ece, cwr]`),
			check: wantMatch(Match{Protocol: ProtoTCP, TCPFlags: &TCPFlags{Set: 0xfd, Clear: TCPFlagSYN}})},
		{name: "flags only clear", src: withMatch(`protocol: tcp, tcp_flags: ["!rst"]`),
			check: wantMatch(Match{Protocol: ProtoTCP, TCPFlags: &TCPFlags{Clear: TCPFlagRST}})},
		{name: "flags bad", src: withMatch(`protocol: tcp, tcp_flags: [syn, SYN, ack, ack, "!ack", bogus]`), errs: []string{
			`p.yaml:3:45: rules[0].match.tcp_flags[1]: unknown TCP flag "SYN"; use fin, syn, rst, psh, ack, urg, ece or cwr, or !name for a flag that must be clear`,
			`p.yaml:3:55: rules[0].match.tcp_flags[3]: TCP flag ack is listed twice`,
			`p.yaml:3:60: rules[0].match.tcp_flags[4]: TCP flag ack cannot be both set and clear`,
			`p.yaml:3:68: rules[0].match.tcp_flags[5]: unknown TCP flag "bogus"; use fin, syn, rst, psh, ack, urg, ece or cwr, or !name for a flag that must be clear`}},
		{name: "flags without tcp", src: withMatch("protocol: udp, tcp_flags: [syn]"), errs: []string{
			`p.yaml:3:28: rules[0].match.tcp_flags: tcp_flags needs protocol tcp (protocol is udp)`}},
		{name: "flags empty", src: withMatch("protocol: tcp, tcp_flags: []"), errs: []string{
			`p.yaml:3:39: rules[0].match.tcp_flags: empty list; leave the field out instead`}},
		{name: "flags unquoted negation in flow", src: withMatch("protocol: tcp, tcp_flags: [syn, !ack]"), errs: []string{
			`p.yaml:3:45: write "!ack" in quotes: YAML reads an unquoted ! as a tag`}},
		{name: "flags unquoted negation in block", src: "rules:\n  - name: r\n    match:\n      protocol: tcp\n      tcp_flags:\n        - syn\n        - !ack\n    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}\n", errs: []string{
			`p.yaml:7:11: write "!ack" in quotes: YAML reads an unquoted ! as a tag`}},

		// VLANs.
		{name: "vlan", src: withMatch("vlan: [200, 100, \"0\", 4095, 100]"),
			check: wantMatch(Match{Protocol: ProtoAny, VLANs: []uint16{0, 100, 200, 4095}})},
		{name: "vlan bad", src: withMatch("vlan: [4096, -1, x, 1.5]"), errs: []string{
			`p.yaml:3:20: rules[0].match.vlan[0]: "4096" is not a VLAN id; use 0 to 4095`,
			`p.yaml:3:26: rules[0].match.vlan[1]: "-1" is not a VLAN id; use 0 to 4095`,
			`p.yaml:3:30: rules[0].match.vlan[2]: "x" is not a VLAN id; use 0 to 4095`,
			`p.yaml:3:33: rules[0].match.vlan[3]: "1.5" is not a VLAN id; use 0 to 4095`}},
	})
}

func TestKeys(t *testing.T) {
	runParseCases(t, []parseCase{
		{name: "mapping", src: withRule("key: {ipv4_prefix: 24, ipv6_prefix: 48}"),
			check: wantLevel(0, Level{Key{KeySrcIP, 24, 48}, tb1000})},
		{name: "mapping ipv4 only", src: withRule("key: {ipv4_prefix: 24}"),
			check: wantLevel(0, Level{Key{KeySrcIP, 24, 64}, tb1000})},
		{name: "src_ip", src: withRule("key: src_ip"), check: wantLevel(0, Level{srcKey, tb1000})},
		{name: "global", src: withRule("key: global"), check: wantLevel(0, Level{Key{Kind: KeyGlobal}, tb1000})},
		{name: "global mapping", src: withRule("key: {type: global}"), check: wantLevel(0, Level{Key{Kind: KeyGlobal}, tb1000})},
		{name: "src_ip+dst_port", src: withRule("match: {protocol: udp}", "key: src_ip+dst_port"),
			check: wantLevel(0, Level{Key{KeySrcIPDstPort, 32, 64}, tb1000})},
		{name: "src_ip+dst_port mapping", src: withRule("match: {protocol: tcp}", "key: {type: src_ip+dst_port, ipv4_prefix: 24}"),
			check: wantLevel(0, Level{Key{KeySrcIPDstPort, 24, 64}, tb1000})},
		{name: "extremes", src: withRule("key: {ipv4_prefix: 1, ipv6_prefix: 128}"),
			check: wantLevel(0, Level{Key{KeySrcIP, 1, 128}, tb1000})},
		{name: "defaults key", src: "defaults:\n  key: {ipv4_prefix: 24, ipv6_prefix: 48}\n" + withRule(),
			check: wantLevel(0, Level{Key{KeySrcIP, 24, 48}, tb1000})},
		{name: "rule key replaces defaults key", src: "defaults:\n  key: {ipv4_prefix: 24, ipv6_prefix: 48}\n" + withRule("key: {ipv4_prefix: 16}"),
			check: wantLevel(0, Level{Key{KeySrcIP, 16, 64}, tb1000})},
		{name: "prefix zero", src: withRule("key: {ipv4_prefix: 0, ipv6_prefix: 129}"), errs: []string{
			`p.yaml:4:24: rules[0].key.ipv4_prefix: ipv4_prefix must be 1 to 32, got "0" (for one bucket for everything, use key: global)`,
			`p.yaml:4:40: rules[0].key.ipv6_prefix: ipv6_prefix must be 1 to 128, got "129" (for one bucket for everything, use key: global)`}},
		{name: "prefix not a number", src: withRule("key: {ipv4_prefix: /24}"), errs: []string{
			`p.yaml:4:24: rules[0].key.ipv4_prefix: ipv4_prefix must be 1 to 32, got "/24" (for one bucket for everything, use key: global)`}},
		{name: "global with prefix", src: withRule("key: {type: global, ipv6_prefix: 48}"), errs: []string{
			`p.yaml:4:25: rules[0].key.ipv6_prefix: key type global takes no prefix`}},
		{name: "unknown key", src: withRule("key: src"), errs: []string{
			`p.yaml:4:10: rules[0].key: unknown key "src"; use src_ip, src_ip+dst_port, src_ip+src_port, global or a mapping like {ipv4_prefix: 24, ipv6_prefix: 48}`}},
		{name: "unknown key type", src: withRule("key: {type: dst_ip}"), errs: []string{
			`p.yaml:4:17: rules[0].key.type: unknown key type "dst_ip"; use src_ip, src_ip+dst_port, src_ip+src_port or global`}},
		{name: "unknown key field", src: withRule("key: {ipv4: 24}"), errs: []string{
			`p.yaml:4:11: rules[0].key: unknown field "ipv4"; allowed: type, ipv4_prefix, ipv6_prefix`}},
		{name: "port key without ports", src: withRule("key: src_ip+dst_port"), errs: []string{
			`p.yaml:4:10: rules[0].key: key src_ip+dst_port needs protocol tcp or udp in the rule's match (protocol is any)`}},
		{name: "port key from defaults", src: "defaults: {key: src_ip+dst_port}\n" + withRule("match: {protocol: icmp}"), errs: []string{
			`p.yaml:1:17: rules[0].key: key src_ip+dst_port needs protocol tcp or udp in the rule's match (protocol is icmp)`}},
	})
}

func TestLimits(t *testing.T) {
	const tbFields = "token_bucket does not take %s; it takes rate and burst"
	runParseCases(t, []parseCase{
		{name: "token bucket", src: withLimit("algorithm: token_bucket, rate: 1000/s, burst: 2000"), check: wantLevel(0, Level{srcKey, tb1000})},
		{name: "token bucket bytes", src: withLimit("algorithm: token_bucket, rate: 8Mbit/s, burst: 64KB"),
			check: wantLevel(0, Level{srcKey, Limit{Algorithm: TokenBucket, Unit: Bytes, Count: 1_000_000, Per: time.Second, Burst: 64_000}})},
		{name: "token bucket byte burst as integer", src: withLimit("algorithm: token_bucket, rate: 1MB/s, burst: 3000"),
			check: wantLevel(0, Level{srcKey, Limit{Algorithm: TokenBucket, Unit: Bytes, Count: 1_000_000, Per: time.Second, Burst: 3000}})},
		{name: "token bucket per hour", src: withLimit("algorithm: token_bucket, rate: 1M/h, burst: 2k"),
			check: wantLevel(0, Level{srcKey, Limit{Algorithm: TokenBucket, Unit: Packets, Count: 1_000_000, Per: time.Hour, Burst: 2000}})},
		{name: "token bucket max burst", src: withLimit("algorithm: token_bucket, rate: 100k/s, burst: 4294967296"),
			check: wantLevel(0, Level{srcKey, Limit{Algorithm: TokenBucket, Unit: Packets, Count: 100_000, Per: time.Second, Burst: 1 << 32}})},
		{name: "token bucket one per hour", src: withLimit("algorithm: token_bucket, rate: 1/h, burst: 10"),
			check: wantLevel(0, Level{srcKey, Limit{Algorithm: TokenBucket, Unit: Packets, Count: 1, Per: time.Hour, Burst: 10}})},
		{name: "fixed window", src: withLimit("algorithm: fixed_window, packets: 100, window: 1s"),
			check: wantLevel(0, Level{srcKey, Limit{Algorithm: FixedWindow, Unit: Packets, Count: 100, Window: time.Second}})},
		{name: "sliding window bytes", src: withLimit("algorithm: sliding_window, bytes: 10MB, window: 100ms"),
			check: wantLevel(0, Level{srcKey, Limit{Algorithm: SlidingWindow, Unit: Bytes, Count: 10_000_000, Window: 100 * time.Millisecond}})},
		{name: "window max count", src: withLimit("algorithm: fixed_window, packets: 1099511627775, window: 24h"),
			check: wantLevel(0, Level{srcKey, Limit{Algorithm: FixedWindow, Unit: Packets, Count: 1<<40 - 1, Window: 24 * time.Hour}})},
		{name: "byte burst under a packet", src: withLimit("algorithm: token_bucket, rate: 1MB/s, burst: 1000"), warns: []string{
			"p.yaml:3:58: rules[0].limit.burst: burst 1000 is less than one 1500-byte packet; larger packets can never conform"}},

		{name: "algorithm missing", src: withLimit("rate: 1/s, burst: 1"), errs: []string{
			"p.yaml:3:12: rules[0].limit: algorithm is required: token_bucket, fixed_window, sliding_window or sliding_log"}},
		{name: "algorithm bad", src: withLimit("algorithm: gcra, rate: 1/s, burst: 1"), errs: []string{
			`p.yaml:3:24: rules[0].limit.algorithm: unknown algorithm "gcra"; use token_bucket, fixed_window, sliding_window, sliding_log or leaky_bucket`}},
		{name: "leaky bucket is the token bucket", src: withLimit("algorithm: leaky_bucket, rate: 1000/s, burst: 2000"), check: wantLevel(0, Level{srcKey, tb1000})},
		{name: "sliding log", src: withLimit("algorithm: sliding_log, packets: 5, window: 1m"),
			check: wantLevel(0, Level{srcKey, Limit{Algorithm: SlidingLog, Unit: Packets, Count: 5, Window: time.Minute}})},
		{name: "sliding log max", src: withLimit("algorithm: sliding_log, packets: 64, window: 1s"),
			check: wantLevel(0, Level{srcKey, Limit{Algorithm: SlidingLog, Unit: Packets, Count: 64, Window: time.Second}})},
		{name: "sliding log too many", src: withLimit("algorithm: sliding_log, packets: 65, window: 1s"), errs: []string{
			`p.yaml:3:46: rules[0].limit.packets: sliding_log holds at most 64 packets per window, got 65; use sliding_window or token_bucket for larger limits`}},
		{name: "sliding log bytes", src: withLimit("algorithm: sliding_log, bytes: 64, window: 1s"), errs: []string{
			`p.yaml:3:37: rules[0].limit.bytes: sliding_log counts packets, not bytes (it logs each admission's time); use sliding_window for a byte limit`}},
		{name: "sliding log fleet", src: "fleet: {redis: redis://127.0.0.1:6379/0}\n" + withLimit("algorithm: sliding_log, packets: 5, window: 1s, scope: fleet"), errs: []string{
			`p.yaml:4:68: rules[0].limit.scope: scope: fleet works with token_bucket and fixed_window, not sliding_log`}},
		{name: "unknown limit field", src: withLimit("algorithm: token_bucket, rate: 1/s, burst: 1, pps: 5"), errs: []string{
			`p.yaml:3:59: rules[0].limit: unknown field "pps"; allowed: algorithm, rate, burst, packets, bytes, window, scope`}},
		{name: "limit a string", src: "rules:\n  - name: r\n    limit: 1000/s\n", errs: []string{
			`p.yaml:3:12: rules[0].limit: expected a mapping with fields algorithm, rate, burst, packets, bytes, window, scope, got "1000/s"`}},
		{name: "rate bad", src: withLimit("algorithm: token_bucket, rate: 1000/sec, burst: 2000"), errs: []string{
			`p.yaml:3:44: rules[0].limit.rate: "1000/sec" ` + rateAdvice}},
		{name: "rate integer", src: withLimit("algorithm: token_bucket, rate: 1000, burst: 2000"), errs: []string{
			`p.yaml:3:44: rules[0].limit.rate: "1000" ` + rateAdvice}},
		{name: "rate zero", src: withLimit("algorithm: token_bucket, rate: 0/s, burst: 1"), errs: []string{
			"p.yaml:3:44: rules[0].limit.rate: rate must be greater than zero; to drop all traffic from an address, use deny"}},
		{name: "rate too high", src: withLimit("algorithm: token_bucket, rate: 200Gbit/s, burst: 1"), errs: []string{
			"p.yaml:3:44: rules[0].limit.rate: rate 200Gbit/s is above the maximum of 100Gbit/s"}},
		{name: "rate missing", src: withLimit("algorithm: token_bucket, burst: 1"), errs: []string{
			"p.yaml:3:12: rules[0].limit: rate is required for token_bucket, e.g. rate: 1000/s"}},
		{name: "burst missing", src: withLimit("algorithm: token_bucket, rate: 1/s"), errs: []string{
			"p.yaml:3:12: rules[0].limit: burst is required for token_bucket: the most a key may send at once above the rate, e.g. burst: 2000 (packets) or burst: 64KB (byte rates)"}},
		{name: "burst zero", src: withLimit("algorithm: token_bucket, rate: 1/s, burst: 0"), errs: []string{
			"p.yaml:3:56: rules[0].limit.burst: burst must be 1 to 4294967296, got 0"}},
		{name: "burst too big", src: withLimit("algorithm: token_bucket, rate: 1/s, burst: 4294967297"), errs: []string{
			"p.yaml:3:56: rules[0].limit.burst: burst must be 1 to 4294967296, got 4294967297"}},
		{name: "burst longer than the datapath holds", src: withLimit("algorithm: token_bucket, rate: 1/h, burst: 100000"), errs: []string{
			"p.yaml:3:56: rules[0].limit.burst: burst 100000 at 1 per 1h0m0s takes 100000h0m0s to refill; the datapath holds at most 20015h59m54.037927936s"}},
		{name: "burst bytes for packets", src: withLimit("algorithm: token_bucket, rate: 1/s, burst: 64KB"), errs: []string{
			"p.yaml:3:56: rules[0].limit.burst: burst 64KB is a byte size, but the rate counts packets"}},
		{name: "burst bad", src: withLimit("algorithm: token_bucket, rate: 1/s, burst: lots"), errs: []string{
			`p.yaml:3:56: rules[0].limit.burst: "lots" is not a packet count; use N, Nk, NM or NG (decimal: 1k = 1000)`}},
		{name: "burst bad bytes", src: withLimit("algorithm: token_bucket, rate: 1MB/s, burst: 64KiB"), errs: []string{
			`p.yaml:3:58: rules[0].limit.burst: "64KiB" is not a byte size; use N, NB, NKB, NMB or NGB (decimal: 1KB = 1000 B)`}},
		{name: "token bucket window fields", src: withLimit("algorithm: token_bucket, rate: 1/s, burst: 1, packets: 5, window: 1s"), errs: []string{
			"p.yaml:3:59: rules[0].limit.packets: " + fmt.Sprintf(tbFields, "packets"),
			"p.yaml:3:71: rules[0].limit.window: " + fmt.Sprintf(tbFields, "window")}},
		{name: "window rate fields", src: withLimit("algorithm: fixed_window, packets: 5, window: 1s, rate: 1/s, burst: 1"), errs: []string{
			"p.yaml:3:62: rules[0].limit.rate: fixed_window does not take rate; it takes packets or bytes, and window",
			"p.yaml:3:73: rules[0].limit.burst: fixed_window does not take burst; it takes packets or bytes, and window"}},
		{name: "window both units", src: withLimit("algorithm: sliding_window, packets: 5, bytes: 5KB, window: 1s"), errs: []string{
			"p.yaml:3:52: rules[0].limit.bytes: give packets or bytes, not both"}},
		{name: "window no unit", src: withLimit("algorithm: sliding_window, window: 1s"), errs: []string{
			"p.yaml:3:12: rules[0].limit: sliding_window needs packets or bytes, e.g. packets: 100"}},
		{name: "window missing", src: withLimit("algorithm: fixed_window, packets: 5"), errs: []string{
			"p.yaml:3:12: rules[0].limit: window is required for fixed_window, e.g. window: 1s"}},
		{name: "window bad", src: withLimit("algorithm: fixed_window, packets: 5, window: 1sec"), errs: []string{
			`p.yaml:3:58: rules[0].limit.window: "1sec" is not a duration; use Go durations like 100ms, 1s, 1m or 1h`}},
		{name: "window too short", src: withLimit("algorithm: fixed_window, packets: 5, window: 500us"), errs: []string{
			`p.yaml:3:58: rules[0].limit.window: window 500us is out of range; use 1ms to 24h`}},
		{name: "window count zero", src: withLimit("algorithm: fixed_window, packets: 0, window: 1s"), errs: []string{
			"p.yaml:3:47: rules[0].limit.packets: packets must be 1 to 1099511627775 (2^40-1), got 0"}},
		{name: "window count too big", src: withLimit("algorithm: fixed_window, bytes: 2000GB, window: 1s"), errs: []string{
			"p.yaml:3:45: rules[0].limit.bytes: bytes must be 1 to 1099511627775 (2^40-1), got 2000GB"}},
		{name: "window packets with unit", src: withLimit("algorithm: fixed_window, packets: 5MB, window: 1s"), errs: []string{
			`p.yaml:3:47: rules[0].limit.packets: "5MB" is not a packet count; use N, Nk, NM or NG (decimal: 1k = 1000)`}},
	})
}

func TestAggregate(t *testing.T) {
	level := func(key string) string {
		return "  - key: " + key + "\n        limit: {algorithm: token_bucket, rate: 1000/s, burst: 2000}"
	}
	runParseCases(t, []parseCase{
		{name: "levels in order", src: withRule("aggregate:", level("{ipv4_prefix: 24, ipv6_prefix: 48}"), level("global")),
			check: func(t *testing.T, p *Policy) {
				want := []Level{{srcKey, tb1000}, {Key{KeySrcIP, 24, 48}, tb1000}, {Key{Kind: KeyGlobal}, tb1000}}
				if got := rule0(t, p).Levels; !reflect.DeepEqual(got, want) {
					t.Fatalf("%+v", got)
				}
			}},
		{name: "three aggregates", src: withRule("aggregate:", level("global"), level("global"), level("global"))},
		{name: "four aggregates", src: withRule("aggregate:", level("global"), level("global"), level("global"), level("global")), errs: []string{
			"p.yaml:11:9: rules[0].aggregate[3]: at most 3 aggregate levels: the datapath applies 4 levels per rule, the rule's own and 3 aggregates"}},
		{name: "empty aggregate", src: withRule("aggregate: []")},
		{name: "aggregate missing key and limit", src: withRule("aggregate:", "  - {}"), errs: []string{
			"p.yaml:5:9: rules[0].aggregate[0]: key is required in an aggregate level, e.g. key: global",
			"p.yaml:5:9: rules[0].aggregate[0]: limit is required in an aggregate level"}},
		{name: "aggregate not a list", src: withRule("aggregate: {key: global}"), errs: []string{
			"p.yaml:4:16: rules[0].aggregate: expected a list of levels like [{key: global, limit: {...}}], got a mapping"}},
		{name: "aggregate bad limit", src: withRule("aggregate:", "  - key: global", "    limit: {algorithm: token_bucket, rate: 1/s, burst: 0}"), errs: []string{
			"p.yaml:6:60: rules[0].aggregate[0].limit.burst: burst must be 1 to 4294967296, got 0"}},
		{name: "aggregate port key", src: withRule("aggregate:", "  - key: src_ip+dst_port", "    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}"), errs: []string{
			"p.yaml:5:14: rules[0].aggregate[0].key: key src_ip+dst_port needs protocol tcp or udp in the rule's match (protocol is any)"}},
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
			`p.yaml:2:20: deny: unknown field "hosts"; allowed: cidrs, files`}},
		{name: "allow a string", src: "allow: 10.0.0.0/8\n", errs: []string{
			`p.yaml:1:8: allow: expected a list of CIDRs or a mapping with cidrs and files, got "10.0.0.0/8"`}},
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
