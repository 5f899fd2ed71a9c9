// SPDX-License-Identifier: Apache-2.0

package agent_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/xdplimit/xdplimit/agent"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

// loginPolicy is dnsPolicy and a sliding_log rule (two packets to UDP port
// 22 per source a minute), whose logs need the table.
const loginPolicy = dnsPolicy + `  - name: login
    match: {protocol: udp, dst_ports: [22]}
    limit: {algorithm: sliding_log, packets: 2, window: 1m}
`

var loginFrame = pktgen.UDP4(netip.MustParseAddr("192.0.2.7"), netip.MustParseAddr("10.0.0.1"), 4000, 22, 10)

// TestSlidingLogTableFollowsPolicy: an attach whose policy has no
// sliding_log level does not allocate the table for their logs; a reload
// that brings the first one in is refused with what to do and changes
// nothing; the restart it asks for adopts the limiter, keeps every other
// key's state, and allocates the table (pinned, for the next attach); a
// restart with no sliding_log level left releases it.
func TestSlidingLogTableFollowsPolicy(t *testing.T) {
	testutil.RequireRoot(t)
	v := newVeth(t)
	iface := v.PeerName
	path := policyFile(t, dnsPolicy)
	logs := func() uint32 { return pinned(t, iface).Limiter.LogsCapacity() }

	a := startKeeping(t, v, agent.Config{Policy: path})
	if got := logs(); got != maps.UnusedLogs {
		t.Fatalf("sliding_log table of %d entries for a policy without sliding_log levels, want %d", got, maps.UnusedLogs)
	}
	verdicts(t, iface, dnsFrame, 1) // spends the source's token bucket burst

	writePolicy(t, path, loginPolicy)
	err := a.Reload("test")
	if err == nil || !strings.Contains(err.Error(), "restart the attach process") {
		t.Fatalf("reload to the first sliding_log level: %v, want a refusal saying to restart", err)
	}
	if !hasRule(t, iface, "dns") || hasRule(t, iface, "login") {
		t.Errorf("after the refused reload the rules in force are %v, want the old policy's", ruleNames(t, iface))
	}
	if err := a.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}

	b := startKeeping(t, v, agent.Config{Policy: path})
	if !b.Adopted() {
		t.Fatal("the restarted agent did not adopt the pinned limiter")
	}
	// The pin holds the new table: the commands, and the next attach, read it.
	if got, want := logs(), uint32(1<<12/16); got != want {
		t.Errorf("after the restart the pinned sliding_log table has %d entries, want %d (--max-sources/16)", got, want)
	}
	if got := verdicts(t, iface, loginFrame, 3); got[0] != xdpPass || got[1] != xdpPass || got[2] != xdpDrop {
		t.Errorf("sliding_log of 2 packets: verdicts %v, want pass, pass, drop", got)
	}
	if err := b.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}

	// The token bucket's key kept its state through both restarts (the
	// source spent its burst in the first attach).
	writePolicy(t, path, dnsPolicy)
	c := startKeeping(t, v, agent.Config{Policy: path})
	if !c.Adopted() {
		t.Fatal("the third agent did not adopt the pinned limiter")
	}
	if got := logs(); got != maps.UnusedLogs {
		t.Errorf("with no sliding_log level left, the sliding_log table has %d entries after a restart, want %d", got, maps.UnusedLogs)
	}
	if got := verdicts(t, iface, dnsFrame, 1); got[0] != xdpDrop {
		t.Errorf("the token bucket's source after two restarts: verdict %v, want drop (its state kept)", got)
	}
}
