// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/xdplimit/xdplimit/internal/command"
	"github.com/xdplimit/xdplimit/internal/netns"
)

// The limits every configuration of the veth comparison enforces, in its
// own terms: a per-source token bucket, then one global bucket for what the
// per-source level admitted (a spoofed flood passes any per-source limit,
// one packet per source, and only an aggregate stops it).
const (
	perSourceRate  = 10      // packets per second per source
	perSourceBurst = 10      // packets
	tableSize      = 1 << 20 // xdplimit's default --max-sources

	// All sources together: far below every configuration's flood rate on
	// this machine, so that what a configuration passes up the stack
	// costs little next to what it drops. With the production example's
	// global rate (100k/s) the stack's share dominated the slower runs here.
	globalRate  = 10000 // packets per second
	globalBurst = 10000 // packets
)

// nftRuleset is an nftables dynamic set with a per-element `limit rate
// over` (one token bucket per source address, the set sized like
// xdplimit's table) followed by a plain `limit rate over` over everything,
// in a prerouting chain at raw priority, before any other netfilter work.
func nftRuleset() string {
	return fmt.Sprintf(`table inet xdplbench
delete table inet xdplbench
table inet xdplbench {
	set src4 {
		type ipv4_addr
		size %d
		flags dynamic,timeout
		timeout 60s
	}
	chain pre {
		type filter hook prerouting priority raw; policy accept;
		meta l4proto udp update @src4 { ip saddr limit rate over %d/second burst %d packets } counter drop
		meta l4proto udp limit rate over %d/second burst %d packets counter drop
	}
}
`, tableSize, perSourceRate, perSourceBurst, globalRate, globalBurst)
}

// hashlimitRules is iptables-legacy (the real xt_hashlimit: the nf_tables
// backend of plain iptables turns hashlimit into an nft meter) with a
// per-source hashlimit, the table sized like xdplimit's, then a hashlimit
// without a mode, which is one global bucket; in the raw table's
// PREROUTING, before conntrack. names makes each run's hash tables new:
// xt_hashlimit shares a table between rules of the same name, and would
// carry one run's state into the next.
func hashlimitRules(names string) string {
	return fmt.Sprintf(`*raw
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A PREROUTING -p udp -m hashlimit --hashlimit-mode srcip --hashlimit-above %d/sec --hashlimit-burst %d --hashlimit-name %ss --hashlimit-htable-size 65536 --hashlimit-htable-max %d --hashlimit-htable-expire 60000 -j DROP
-A PREROUTING -p udp -m hashlimit --hashlimit-above %d/sec --hashlimit-burst %d --hashlimit-name %sg -j DROP
COMMIT
`, perSourceRate, perSourceBurst, names, tableSize, globalRate, globalBurst, names)
}

const hashlimitFlush = "*raw\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n"

// runIn runs a command inside ns with a hard timeout, with input written to
// a file passed as its last argument.
func runIn(ns *netns.Netns, input string, name string, args ...string) error {
	if input != "" {
		dir, err := os.MkdirTemp("", "xdplbench-nf-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		f := filepath.Join(dir, "rules")
		if err := os.WriteFile(f, []byte(input), 0o600); err != nil {
			return err
		}
		args = append(args, f)
	}
	return ns.Do(func() error {
		out, err := command.Run(30*time.Second, name, args...)
		if err != nil {
			return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return nil
	})
}

// nftSetup installs the ruleset, fresh: a new table, an empty set.
func nftSetup(ns *netns.Netns) (func() error, error) {
	if err := runIn(ns, nftRuleset(), "nft", "-f"); err != nil {
		return nil, err
	}
	return func() error { return runIn(ns, "", "nft", "delete", "table", "inet", "xdplbench") }, nil
}

// hashlimitSetup installs the rules with hash tables named for this run.
func hashlimitSetup(ns *netns.Netns, run int) (func() error, error) {
	if err := runIn(ns, hashlimitRules(fmt.Sprintf("xb%d", run)), "iptables-legacy-restore"); err != nil {
		return nil, err
	}
	return func() error { return runIn(ns, hashlimitFlush, "iptables-legacy-restore") }, nil
}
