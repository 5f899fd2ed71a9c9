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
			check: wantMatch(Match{Protocol: ProtoICMP, ICMP: &ICMP{Type: 8, Code: -1}})},
		{name: "icmpv6 echo-request", src: withMatch("protocol: icmpv6, icmp: {type: echo-request, code: 0}"),
			check: wantMatch(Match{Protocol: ProtoICMPv6, ICMP: &ICMP{Type: 128, Code: 0}})},
		{name: "icmpv6 neighbor-solicitation", src: withMatch("protocol: icmpv6, icmp: {type: neighbor-solicitation}"),
			check: wantMatch(Match{Protocol: ProtoICMPv6, ICMP: &ICMP{Type: 135, Code: -1}})},
		{name: "icmp numbers", src: withMatch("protocol: icmp, icmp: {type: 3, code: 4}"),
			check: wantMatch(Match{Protocol: ProtoICMP, ICMP: &ICMP{Type: 3, Code: 4}})},
		{name: "icmp code only", src: withMatch("protocol: icmp, icmp: {code: 1}"),
			check: wantMatch(Match{Protocol: ProtoICMP, ICMP: &ICMP{Type: -1, Code: 1}})},

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
			`p.yaml:3:42: rules[0].match.icmp.type: unknown icmp type "neighbor-solicitation"; use 0 to 255 or one of address-mask-reply, address-mask-request, dest-unreachable, echo-reply, echo-request, info-reply, info-request, parameter-problem, redirect, router-advertisement, router-solicitation, source-quench, time-exceeded, timestamp-reply, timestamp-request`}},
		{name: "icmp type out of range", src: withMatch("protocol: icmp, icmp: {type: 256, code: 300}"), errs: []string{
			`p.yaml:3:42: rules[0].match.icmp.type: "256" is out of range; ICMP types are 0 to 255`,
			`p.yaml:3:53: rules[0].match.icmp.code: "300" is not an ICMP code; use 0 to 255`}},
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

func TestSignatureString(t *testing.T) {
	m := matchOf(t, "protocol: icmp, icmp: {type: echo-request, code: 0}, length: [1000-1500], ttl: 64, dscp: [46]")
	want := "protocol icmp, length [1000-1500], ttl [64], dscp [46], icmp {type echo-request, code 0}"
	if got := m.String(); got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
}
