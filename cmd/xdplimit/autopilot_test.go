// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/agent"
)

// The list as a terminal shows it: the rules with their evidence and age,
// the attacks with why they have no rule.
func TestPrintAutopilot(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	v := agent.AutopilotView{Interface: "eth0", On: true, Mode: "enforce", Action: "drop",
		Rules: []agent.AutopilotRule{{Name: "autopilot-udp53-1", Dest: "udp 192.0.2.1 port 53", Fingerprint: "ttl 50-60, length 1200-1210",
			Coverage: 0.99, AttackSamples: 1200, BaselineShare: 0, BaselineSamples: 600, Kept: true,
			Created: now.Add(-90 * time.Second), LastAttack: now.Add(-5 * time.Second), AgeSeconds: 90}},
		Attacks: []agent.AttackView{{Dest: "udp 192.0.2.1 port 123", Since: now.Add(-20 * time.Second), PeakRate: 50000,
			BaselineRate: 12, NoRule: "the attack shares no trait that normal traffic to it lacks"}}}
	var b bytes.Buffer
	printAutopilot(&b, v, now)
	out := b.String()
	for _, want := range []string{"eth0: autopilot on (mode enforce, action drop): 1 rule, 1 attack in progress",
		"autopilot-udp53-1 (kept)", "1m30s", "5s ago", "99.0% of 1200", "0.00% of 600", "ttl 50-60, length 1200-1210",
		"attack on udp 192.0.2.1 port 123 since 20s ago: peak 50000 packets/s, baseline 12; no rule: the attack shares no trait"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	printAutopilot(&b, agent.AutopilotView{Interface: "eth0"}, now)
	if !strings.Contains(b.String(), "no autopilot: section") {
		t.Errorf("off: %s", b.String())
	}
}

// Without an attach process the commands say so; a rule name is not
// checked as an interface name.
func TestAutopilotCmdNoAgent(t *testing.T) {
	for _, args := range [][]string{{"autopilot", "list", "xnoagent0"}, {"autopilot", "keep", "xnoagent0", "autopilot-udp53-1"},
		{"autopilot", "remove", "xnoagent0", "autopilot-udp53-1"}} {
		var out, errw bytes.Buffer
		if code := run(args, &out, &errw); code == 0 || !strings.Contains(errw.String(), "no attach process runs for xnoagent0") {
			t.Errorf("%v: exit %d, %s", args, code, errw.String())
		}
	}
}
