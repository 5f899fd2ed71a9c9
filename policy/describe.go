// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"fmt"
	"io"
)

// Describe writes a human summary of the policy, as `xdplimit policy check`
// prints it: what the datapath will do, in the order it does it, with every
// limit in normalised units.
func (p *Policy) Describe(w io.Writer) {
	fmt.Fprintf(w, "policy %s (sha256 %x)\n", p.Path, p.SHA256[:8])
	switch p.Mode {
	case ModeShadow:
		fmt.Fprintf(w, "mode: shadow (dry run: nothing is dropped; would-drops are counted)\n")
	default:
		fmt.Fprintf(w, "mode: %s\n", p.Mode)
	}
	fmt.Fprintf(w, "allow: %d %s, never limited\n", len(p.Allow), plural(len(p.Allow), "prefix", "prefixes"))
	fmt.Fprintf(w, "deny: %d %s, always dropped\n", len(p.Deny), plural(len(p.Deny), "prefix", "prefixes"))
	if len(p.Allow) > 0 && len(p.Deny) > 0 {
		fmt.Fprintf(w, "  an address in both lists goes by its longest matching prefix\n")
	}
	fmt.Fprintf(w, "rules: %d, first match wins\n", len(p.Rules))
	for i, r := range p.Rules {
		p.describeRule(w, i, r)
	}
	fmt.Fprintf(w, "unmatched traffic: pass\n")
	fmt.Fprintf(w, "unparsed frames (truncated, bad lengths or checksum, too many VLAN tags): %s\n", p.Unparsed)
	fmt.Fprintf(w, "non-IP frames (ARP, LLDP, ...): pass\n")
	if c := p.Conversations; c.Any() {
		fmt.Fprintf(w, "conversations (before the rules, after allow, deny and bans): %s\n", c)
	}
	if f := p.Fleet; f != nil {
		fmt.Fprintf(w, "fleet: Redis %v (cluster %v), namespace %s, sync every %s, fallback %s, debt horizon %s; %s\n",
			f.Redis, f.Cluster, f.Namespace, f.Sync, f.Fallback, f.DebtHorizon, f.Share)
	}
	if g := p.GeoIP; g != nil {
		g.describe(w)
	}
	if c := p.CrowdSec; c != nil {
		fmt.Fprintf(w, "crowdsec: %s\n", c)
	}
	if p.Bans.Set || p.Fleet != nil || p.CrowdSec != nil {
		fmt.Fprintf(w, "bans from the fleet and feeds: %s\n", p.Bans)
	}
	if p.Log.Set {
		fmt.Fprintf(w, "drop log: %s\n", p.Log)
	}
	if p.Capture.OneIn != 0 {
		fmt.Fprintf(w, "capture: %s\n", p.Capture)
	}
	if a := p.Autopilot; a != nil {
		fmt.Fprintf(w, "autopilot: %s\n", a)
	}
	for _, r := range p.Rules {
		if r.Action == ActionReject {
			fmt.Fprintf(w, "answers of reject rules: %s\n", p.Reject)
			break
		}
	}
	if n := len(p.Warnings); n > 0 {
		fmt.Fprintf(w, "%d %s\n", n, plural(n, "warning", "warnings"))
	}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// describeRule is Describe's lines of the i-th rule.
func (p *Policy) describeRule(w io.Writer, i int, r Rule) {
	fmt.Fprintf(w, "  %d. %s (line %d): %s\n", i+1, r.Name, r.Line, r.Match)
	for j, l := range r.Levels {
		what := "own"
		if j > 0 {
			what = "aggregate"
		}
		fmt.Fprintf(w, "     %-9s key %s: %s\n", what, l.Key, l.Limit)
		if l.Limit.Scope == ScopeFleet && p.Fleet != nil {
			fmt.Fprintf(w, "               %s\n", p.Fleet.bound(l.Limit))
		}
	}
	fmt.Fprintf(w, "     over limit: %s\n", r.Action)
	if r.Action == ActionSynCookie {
		fmt.Fprintf(w, "     answers the SYN with a SYN-ACK carrying a SYN cookie; the host needs net.ipv4.tcp_syncookies=2 "+
			"and net.ipv4.tcp_timestamps=2 (or 0), which attach checks\n")
	}
	if r.Action == ActionReject {
		fmt.Fprintf(w, "     answers with a TCP reset, or an ICMP unreachable (administratively prohibited) for other "+
			"protocols, within the reject budget, then drops\n")
	}
	if b := r.Ban; b != nil {
		verb := "bans"
		if r.Action != ActionBan {
			verb = "would ban (shadow: recorded and counted, not enforced)"
		}
		fmt.Fprintf(w, "     %s the source (ipv4/%d, ipv6/%d) for %v: every packet from it dropped, after allow, before any rule\n",
			verb, b.IPv4Prefix, b.IPv6Prefix, b.For)
	}
}
