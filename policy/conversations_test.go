// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestConversationsSection(t *testing.T) {
	want := func(tcp, udp ConvCheck, rate uint64, hold time.Duration) func(*testing.T, *Policy) {
		return func(t *testing.T, p *Policy) {
			c := p.Conversations
			if c.TCP != tcp || c.UDP != udp || c.ArmRate != rate || c.Hold != hold {
				t.Fatalf("conversations = %+v, want tcp %+v udp %+v, arm %d/s hold %v", c, tcp, udp, rate, hold)
			}
		}
	}
	off, ua, always := ConvCheck{}, ConvCheck{When: WhenUnderAttack}, ConvCheck{When: WhenAlways}
	runParseCases(t, []parseCase{
		{name: "absent", src: "rules: []\n", check: want(off, off, 1000, time.Minute)},
		{name: "words", src: "conversations: {tcp: under_attack, udp: always}\nrules: []\n", check: want(ua, always, 1000, time.Minute)},
		{name: "mapping", src: "conversations:\n  tcp: {}\n  udp: {when: always, action: shadow}\nrules: []\n",
			check: want(ua, ConvCheck{When: WhenAlways, Shadow: true}, 1000, time.Minute)},
		{name: "arm", src: "conversations: {udp: under_attack, arm: {rate: 60000/m, hold: 5m}}\nrules: []\n",
			check: want(off, ua, 1000, 5*time.Minute)},
		{name: "all off", src: "conversations: {tcp: off}\nrules: []\n", check: want(off, off, 1000, time.Minute),
			warns: []string{"p.yaml:1:1: conversations: every check is off: the section has no effect"}},

		{name: "reflection", src: "conversations: {reflection: always}\nrules: []\n", check: func(t *testing.T, p *Policy) {
			c := p.Conversations
			if c.Reflection.When != WhenAlways || len(c.ReflectorPorts) != len(DefaultReflectorPorts) || c.Window != 30*time.Second {
				t.Fatalf("reflection %+v ports %v window %v", c.Reflection, c.ReflectorPorts, c.Window)
			}
		}},
		{name: "reflection ports and window", src: "conversations:\n  reflection: {ports: [53, 123, 5353], window: 5s, action: shadow}\nrules: []\n",
			check: func(t *testing.T, p *Policy) {
				c := p.Conversations
				want := []PortRange{{53, 53}, {123, 123}, {5353, 5353}}
				if c.Reflection != (ConvCheck{When: WhenUnderAttack, Shadow: true}) || !slices.Equal(c.ReflectorPorts, want) || c.Window != 5*time.Second {
					t.Fatalf("reflection %+v ports %v window %v", c.Reflection, c.ReflectorPorts, c.Window)
				}
			}},
		{name: "reflection window too short", src: "conversations: {reflection: {window: 1ms}}\nrules: []\n", errs: []string{
			"p.yaml:1:38: conversations.reflection.window: window must be 100ms to 1h0m0s, got 1ms"}},
		{name: "ports on tcp", src: "conversations: {tcp: {ports: [53]}}\nrules: []\n", errs: []string{
			`p.yaml:1:23: conversations.tcp: unknown field "ports"; allowed: when, action, forwarded`}},
		{name: "forwarded by conntrack", src: "conversations:\n  tcp: {when: always, forwarded: conntrack}\n  udp: {forwarded: pass}\nrules: []\n",
			check: want(ConvCheck{When: WhenAlways, Conntrack: true}, ua, 1000, time.Minute)},
		{name: "udp forwarded by conntrack", src: "conversations: {udp: {forwarded: conntrack}}\nrules: []\n", errs: []string{
			"p.yaml:1:34: conversations.udp.forwarded: conntrack cannot judge forwarded UDP: a datagram that opens a new flow " +
				"has no entry yet, so every new flow would be dropped; only tcp and reflection take conntrack"}},
		{name: "unknown forwarded", src: "conversations: {reflection: {forwarded: nat}}\nrules: []\n", errs: []string{
			`p.yaml:1:41: conversations.reflection.forwarded: unknown forwarded "nat"; use pass or conntrack`}},
		{name: "unknown when", src: "conversations: {tcp: sometimes}\nrules: []\n", errs: []string{
			`p.yaml:1:22: conversations.tcp: unknown when "sometimes"; use off, under_attack or always`}},
		{name: "unknown action", src: "conversations: {tcp: {action: reject}}\nrules: []\n", errs: []string{
			`p.yaml:1:31: conversations.tcp.action: unknown action "reject"; use drop or shadow`}},
		{name: "unknown check", src: "conversations: {icmp: always}\nrules: []\n", errs: []string{
			`p.yaml:1:17: conversations: unknown field "icmp" (did you mean "tcp"?); allowed: tcp, udp, reflection, arm`}},
		{name: "byte rate", src: "conversations: {tcp: always, arm: {rate: 1MB/s}}\nrules: []\n", errs: []string{
			"p.yaml:1:42: conversations.arm.rate: rate 1MB/s counts bytes; give packets per second, like 1000/s"}},
		{name: "slow rate", src: "conversations: {tcp: always, arm: {rate: 30/m}}\nrules: []\n", errs: []string{
			"p.yaml:1:42: conversations.arm.rate: rate 30/m: give 1/s to 100000000/s"}},
		{name: "short hold", src: "conversations: {tcp: always, arm: {hold: 10ms}}\nrules: []\n", errs: []string{
			"p.yaml:1:42: conversations.arm.hold: hold must be 1s to 24h0m0s, got 10ms"}},
		{name: "bad hold", src: "conversations: {tcp: always, arm: {hold: soon}}\nrules: []\n", errs: []string{
			`p.yaml:1:42: conversations.arm.hold: expected a duration like 1m, got "soon"`}},
	})
	p, err := Parse("p.yaml", []byte("conversations: {tcp: under_attack, udp: {when: always, action: shadow}}\nrules: []\n"))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	p.Describe(&b)
	line := "conversations (before the rules, after allow, deny and bans): TCP without SYN to this host that no socket owns: " +
		"under_attack; UDP to a port of this host without a socket: always, in shadow (counted and logged, never dropped); " +
		"under_attack arms at 1000/s to one destination, disarms after 1m below half of it\n"
	if !strings.Contains(b.String(), line) {
		t.Errorf("policy check lacks\n%s\nin\n%s", line, b.String())
	}
}
