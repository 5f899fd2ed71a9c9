// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"testing"
)

func TestSignatureFields(t *testing.T) {
	runParseCases(t, []parseCase{
		{name: "length scalar range", src: withMatch("length: 1000-1500"),
			check: wantMatch(Match{Protocol: ProtoAny, Length: []Range{{1000, 1500}}})},
		{name: "length list merged", src: withMatch("length: [60, 512-1500, 1400-9000]"),
			check: wantMatch(Match{Protocol: ProtoAny, Length: []Range{{60, 60}, {512, 9000}}})},
		{name: "ttl", src: withMatch("protocol: tcp, ttl: 250-255"),
			check: wantMatch(Match{Protocol: ProtoTCP, TTL: []Range{{250, 255}}})},
		{name: "dscp", src: withMatch("dscp: [46, 8-10]"),
			check: wantMatch(Match{Protocol: ProtoAny, DSCP: []Range{{8, 10}, {46, 46}}})},
		{name: "tos", src: withMatch("tos: 184"),
			check: wantMatch(Match{Protocol: ProtoAny, TOS: []Range{{184, 184}}})},
		{name: "icmp echo-request", src: withMatch("protocol: icmp, icmp: {type: echo-request}"),
			check: wantMatch(Match{Protocol: ProtoICMP, ICMP: &ICMP{Types: []Range{{8, 8}}}})},
		{name: "icmpv6 echo-request", src: withMatch("protocol: icmpv6, icmp: {type: echo-request, code: 0}"),
			check: wantMatch(Match{Protocol: ProtoICMPv6, ICMP: &ICMP{Types: []Range{{128, 128}}, Codes: []Range{{0, 0}}}})},
		{name: "icmpv6 neighbor-solicitation", src: withMatch("protocol: icmpv6, icmp: {type: neighbor-solicitation}"),
			check: wantMatch(Match{Protocol: ProtoICMPv6, ICMP: &ICMP{Types: []Range{{135, 135}}}})},
		{name: "icmp numbers", src: withMatch("protocol: icmp, icmp: {type: 3, code: 4}"),
			check: wantMatch(Match{Protocol: ProtoICMP, ICMP: &ICMP{Types: []Range{{3, 3}}, Codes: []Range{{4, 4}}}})},
		{name: "icmp code only", src: withMatch("protocol: icmp, icmp: {code: 1}"),
			check: wantMatch(Match{Protocol: ProtoICMP, ICMP: &ICMP{Codes: []Range{{1, 1}}}})},
		{name: "icmp type list", src: withMatch("protocol: icmp, icmp: {type: [echo-request, echo-reply], code: [0-3, 13]}"),
			check: wantMatch(Match{Protocol: ProtoICMP, ICMP: &ICMP{Types: []Range{{0, 0}, {8, 8}}, Codes: []Range{{0, 3}, {13, 13}}}})},
		{name: "icmp names and numbers merged", src: withMatch("protocol: icmpv6, icmp: {type: [echo-request, 129, 1-4, dest-unreachable]}"),
			check: wantMatch(Match{Protocol: ProtoICMPv6, ICMP: &ICMP{Types: []Range{{1, 4}, {128, 129}}}})},
		{name: "icmp type range scalar", src: withMatch("protocol: icmp, icmp: {type: 13-18, code: 0}"),
			check: wantMatch(Match{Protocol: ProtoICMP, ICMP: &ICMP{Types: []Range{{13, 18}}, Codes: []Range{{0, 0}}}})},
		{name: "icmp code list only", src: withMatch(`protocol: icmp, icmp: {code: [1, "2", 0-1, 255]}`),
			check: wantMatch(Match{Protocol: ProtoICMP, ICMP: &ICMP{Codes: []Range{{0, 2}, {255, 255}}}})},
		{name: "icmp numbers without protocol name", src: withMatch("protocol: icmp, icmp: {type: [0-255]}"),
			check: wantMatch(Match{Protocol: ProtoICMP, ICMP: &ICMP{Types: []Range{{0, 255}}}})},

		{name: "length out of range", src: withMatch("length: [70000, 9-3, x]"), errs: []string{
			`p.yaml:3:22: rules[0].match.length[0]: "70000" is out of range; lengths are 0 to 65535`,
			`p.yaml:3:29: rules[0].match.length[1]: "9-3" is an empty range; write the lower length first`,
			`p.yaml:3:34: rules[0].match.length[2]: "x" is not a length or range; use N or LO-HI with lengths 0 to 65535`}},
		{name: "ttl out of range", src: withMatch("ttl: 250-256"), errs: []string{
			`p.yaml:3:18: rules[0].match.ttl: "250-256" is out of range; TTLs are 0 to 255`}},
		{name: "dscp out of range", src: withMatch("dscp: [64]"), errs: []string{
			`p.yaml:3:20: rules[0].match.dscp[0]: "64" is out of range; DSCP values are 0 to 63`}},
		{name: "tos out of range", src: withMatch("tos: [256]"), errs: []string{
			`p.yaml:3:19: rules[0].match.tos[0]: "256" is out of range; TOS values are 0 to 255`}},
		{name: "dscp and tos", src: withMatch("dscp: [46], tos: [184]"), errs: []string{
			`p.yaml:3:25: rules[0].match.tos: dscp and tos cannot both be set; dscp is the upper six bits of tos`}},
		{name: "length empty list", src: withMatch("length: []"), errs: []string{
			`p.yaml:3:21: rules[0].match.length: empty list; leave the field out instead`}},
		{name: "icmp without protocol", src: withMatch("icmp: {type: 8}"), errs: []string{
			`p.yaml:3:13: rules[0].match.icmp: icmp needs protocol icmp or icmpv6 (protocol is any)`}},
		{name: "icmp name without protocol", src: withMatch("protocol: udp, icmp: {type: echo-request}"), errs: []string{
			`p.yaml:3:28: rules[0].match.icmp: icmp needs protocol icmp or icmpv6 (protocol is udp)`,
			`p.yaml:3:41: rules[0].match.icmp.type: ICMP type "echo-request": a type name needs protocol icmp or icmpv6`}},
		{name: "icmp unknown name", src: withMatch("protocol: icmp, icmp: {type: neighbor-solicitation}"), errs: []string{
			`p.yaml:3:42: rules[0].match.icmp.type: unknown icmp type "neighbor-solicitation"; use 0 to 255, LO-HI or one of address-mask-reply, address-mask-request, dest-unreachable, echo-reply, echo-request, info-reply, info-request, parameter-problem, redirect, router-advertisement, router-solicitation, source-quench, time-exceeded, timestamp-reply, timestamp-request`}},
		{name: "icmp type out of range", src: withMatch("protocol: icmp, icmp: {type: 256, code: 300}"), errs: []string{
			`p.yaml:3:42: rules[0].match.icmp.type: "256" is out of range; ICMP types are 0 to 255`,
			`p.yaml:3:53: rules[0].match.icmp.code: "300" is out of range; ICMP codes are 0 to 255`}},
		{name: "icmp list errors", src: withMatch("protocol: icmp, icmp: {type: [echo-request, ping, 256, 9-3, 1234567], code: [0, x, 3-300, [1]]}"), errs: []string{
			`p.yaml:3:57: rules[0].match.icmp.type[1]: unknown icmp type "ping"; use 0 to 255, LO-HI or one of address-mask-reply, address-mask-request, dest-unreachable, echo-reply, echo-request, info-reply, info-request, parameter-problem, redirect, router-advertisement, router-solicitation, source-quench, time-exceeded, timestamp-reply, timestamp-request`,
			`p.yaml:3:63: rules[0].match.icmp.type[2]: "256" is out of range; ICMP types are 0 to 255`,
			`p.yaml:3:68: rules[0].match.icmp.type[3]: "9-3" is an empty range; write the lower ICMP type first`,
			`p.yaml:3:73: rules[0].match.icmp.type[4]: "1234567" is out of range; ICMP types are 0 to 255`,
			`p.yaml:3:93: rules[0].match.icmp.code[1]: "x" is not an ICMP code or range; use N or LO-HI with ICMP codes 0 to 255`,
			`p.yaml:3:96: rules[0].match.icmp.code[2]: "3-300" is out of range; ICMP codes are 0 to 255`,
			`p.yaml:3:103: rules[0].match.icmp.code[3]: expected an ICMP code or range, got a list`}},
		{name: "icmp empty lists", src: withMatch("protocol: icmp, icmp: {type: [], code: []}"), errs: []string{
			`p.yaml:3:42: rules[0].match.icmp.type: empty list; leave the field out instead`,
			`p.yaml:3:52: rules[0].match.icmp.code: empty list; leave the field out instead`}},
		{name: "icmp names in a list without protocol", src: withMatch("icmp: {type: [8, echo-request]}"), errs: []string{
			`p.yaml:3:13: rules[0].match.icmp: icmp needs protocol icmp or icmpv6 (protocol is any)`,
			`p.yaml:3:30: rules[0].match.icmp.type[1]: ICMP type "echo-request": a type name needs protocol icmp or icmpv6`}},
		{name: "icmp empty", src: withMatch("protocol: icmp, icmp: {}"), errs: []string{
			`p.yaml:3:35: rules[0].match.icmp: empty icmp; give a type, a code or both, or leave the field out`}},
		{name: "icmp scalar", src: withMatch("protocol: icmp, icmp: 8"), errs: []string{
			`p.yaml:3:35: rules[0].match.icmp: expected a mapping like {type: echo-request, code: 0}, got 8`}},

		{name: "key src_ip+src_port", src: "rules:\n  - name: r\n    match: {protocol: udp, src_ports: [53]}\n    key: src_ip+src_port\n    limit: {algorithm: token_bucket, rate: 1000/s, burst: 2000}\n",
			check: wantLevel(0, Level{Key{KeySrcIPSrcPort, 32, 64}, Limit{Algorithm: TokenBucket, Unit: Packets, Count: 1000, Per: 1e9, Burst: 2000}})},
		{name: "key src_ip+src_port needs ports", src: withRule("key: src_ip+src_port"), errs: []string{
			`p.yaml:4:10: rules[0].key: key src_ip+src_port needs protocol tcp or udp in the rule's match (protocol is any)`}},
	})
}

func TestICMPString(t *testing.T) {
	for _, c := range []struct{ match, want string }{
		{"protocol: icmp, icmp: {type: echo-request}", "protocol icmp, icmp {type echo-request}"},
		{"protocol: icmp, icmp: {code: 4}", "protocol icmp, icmp {code 4}"},
		{"protocol: icmp, icmp: {type: [echo-request, echo-reply], code: [0-3, 13]}", "protocol icmp, icmp {type [echo-reply, echo-request], code [0-3, 13]}"},
		// Merged into 128-129, written back as names.
		{"protocol: icmpv6, icmp: {type: [echo-request, echo-reply]}", "protocol icmpv6, icmp {type [echo-request, echo-reply]}"},
		// 1 and 2 have no name in ICMP: the range stays numbers.
		{"protocol: icmp, icmp: {type: [0-5, 200]}", "protocol icmp, icmp {type [0-5, 200]}"},
		{"protocol: icmp, icmp: {type: 42}", "protocol icmp, icmp {type 42}"},
	} {
		if got := matchOf(t, c.match).String(); got != c.want {
			t.Errorf("%s: String() = %q, want %q", c.match, got, c.want)
		}
	}
}

func TestICMPMatches(t *testing.T) {
	ic := matchOf(t, "protocol: icmp, icmp: {type: [dest-unreachable, 11], code: [0-1, 4]}").ICMP
	for _, c := range []struct {
		typ, code uint8
		want      bool
	}{{3, 0, true}, {3, 1, true}, {11, 4, true}, {3, 2, false}, {3, 5, false}, {8, 0, false}, {12, 0, false}} {
		if got := ic.Matches(c.typ, c.code); got != c.want {
			t.Errorf("type %d code %d: %v, want %v", c.typ, c.code, got, c.want)
		}
	}
}

func TestSignatureString(t *testing.T) {
	m := matchOf(t, "protocol: icmp, icmp: {type: echo-request, code: 0}, length: [1000-1500], ttl: 64, dscp: [46]")
	want := "protocol icmp, length [1000-1500], ttl [64], dscp [46], icmp {type echo-request, code 0}"
	if got := m.String(); got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
}
