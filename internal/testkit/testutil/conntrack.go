// SPDX-License-Identifier: Apache-2.0

package testutil

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/xdplimit/xdplimit/maps"
)

// conntrackRuleset makes netfilter track every connection of a namespace:
// conntrack registers its hooks in a namespace only while a rule there
// uses it, as NAT, a stateful firewall or this `ct` expression does.
const conntrackRuleset = `table inet xdpltest_ct {
	chain pre { type filter hook prerouting priority -300; ct state invalid counter; }
	chain out { type filter hook output priority -300; ct state invalid counter; }
}
`

// TrackConnections makes conntrack track n's traffic, as on a router with
// a stateful firewall, and requires that XDP programs can look it up (the
// kernel's nf_conntrack, Linux 6.0+). The ruleset goes with n.
func (n *Netns) TrackConnections(tb testing.TB) {
	tb.Helper()
	Require(tb, maps.ConntrackLookups() == nil, "%v", maps.ConntrackLookups())
	bin, err := exec.LookPath("nft")
	Require(tb, err == nil, "nft not found (Debian package nftables; run make deps)")
	cmd := exec.Command(bin, "-f", "-")
	cmd.Stdin = strings.NewReader(conntrackRuleset)
	var out []byte
	if err := n.Do(func() error {
		var err error
		out, err = cmd.CombinedOutput()
		return err
	}); err != nil {
		tb.Fatalf("nft in %s: %v\n%s", n, err, out)
	}
}
