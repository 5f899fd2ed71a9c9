// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"testing"
)

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
			`p.yaml:3:13: rules[0].match: unknown field "dst_port" (did you mean "dst_ports"?); allowed: protocol, dst_ports, src_ports, src_cidrs, dst_cidrs, src_countries, src_asns, tcp_flags, vlan, length, ttl, dscp, tos, icmp, payload`}},
		{name: "match not a mapping", src: "rules:\n  - name: r\n    match: udp\n    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}\n", errs: []string{
			`p.yaml:3:12: rules[0].match: expected a mapping with fields protocol, dst_ports, src_ports, src_cidrs, dst_cidrs, src_countries, src_asns, tcp_flags, vlan, length, ttl, dscp, tos, icmp, payload, got "udp"`}},

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
