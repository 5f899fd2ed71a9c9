// SPDX-License-Identifier: Apache-2.0

// Counting each recorded decision into the report, and checking the sum
// against the counters the program keeps itself, so that a decision the
// program failed to record cannot make the report quietly wrong.

package replay

import (
	"fmt"

	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/policy"
)

// banStarted says whether the decision started a ban: a rule with a ban
// refused the frame (the datapath bans at every refusal of such a rule).
func banStarted(p *policy.Policy, d maps.Decision, data []byte) (BanEvent, bool) {
	if d.Why != maps.WhyRule || d.Verdict == maps.VerdictPass || d.Rule < 0 || d.Rule >= len(p.Rules) {
		return BanEvent{}, false
	}
	r := p.Rules[d.Rule]
	src := sourceOf(data)
	if r.Ban == nil || !src.IsValid() {
		return BanEvent{}, false
	}
	bits := r.Ban.IPv6Prefix
	if src.Is4() {
		bits = r.Ban.IPv4Prefix
	}
	pfx, _ := src.Prefix(bits)
	return BanEvent{For: r.Ban.For, Prefix: pfx, Rule: r.Name, Shadow: d.Verdict == maps.VerdictShadow}, true
}

func (r *Report) tally(d maps.Decision, bytes int) error {
	switch d.Why {
	case maps.WhyNonIP:
		r.NonIP.add(bytes)
	case maps.WhyMalformed:
		r.Malformed.add(bytes)
	case maps.WhyAllow:
		r.Allow.add(bytes)
	case maps.WhyDeny:
		r.Deny.add(bytes)
	case maps.WhyUnmatched:
		r.Unmatched.add(bytes)
	case maps.WhyBan:
		r.Banned.add(bytes)
	case maps.WhyNoRequest:
		r.NoRequest.add(bytes)
	case maps.WhyRule:
		if d.Rule < 0 || d.Rule >= len(r.Rules) {
			return fmt.Errorf("decided by rule %d, but the policy has %d", d.Rule, len(r.Rules))
		}
		rr := &r.Rules[d.Rule]
		switch d.Verdict {
		case maps.VerdictPass:
			rr.Pass.add(bytes)
		case maps.VerdictDrop:
			rr.Drop.add(bytes)
		case maps.VerdictShadow:
			rr.Shadow.add(bytes)
		case maps.VerdictCookie:
			rr.Cookie.add(bytes)
		case maps.VerdictReject:
			rr.Reject.add(bytes)
		default:
			return fmt.Errorf("unknown verdict %v", d.Verdict)
		}
		if d.Verdict != maps.VerdictPass {
			if d.Level < 0 || d.Level >= len(rr.Refused) {
				return fmt.Errorf("refused by level %d of rule %s, which has %d", d.Level, rr.Name, len(rr.Refused))
			}
			rr.Refused[d.Level]++
		}
	default:
		return fmt.Errorf("unknown decision %v", d.Why)
	}
	return nil
}

// crossCheck compares the tally of recorded decisions with the counters
// the program keeps itself. They agree unless a decision was not recorded
// (a path that returns without recording would leave the previous frame's
// decision in place), which would make the report wrong.
func (r *Report) crossCheck(l *maps.Limiter, base map[maps.Counter]maps.CounterValue) error {
	stats, err := l.RuleStats()
	if err != nil {
		return err
	}
	if len(stats) != len(r.Rules) {
		return fmt.Errorf("the program holds %d rules, the policy has %d", len(stats), len(r.Rules))
	}
	for i, s := range stats {
		rr := r.Rules[i]
		for v, c := range map[maps.Verdict]Counts{maps.VerdictPass: rr.Pass, maps.VerdictDrop: rr.Drop,
			maps.VerdictShadow: rr.Shadow, maps.VerdictCookie: rr.Cookie, maps.VerdictReject: rr.Reject} {
			if got := s.Verdicts[v]; got.Packets != c.Packets || got.Bytes != c.Bytes {
				return fmt.Errorf("rule %s: the program counted %v %d packets, %d bytes; its recorded decisions add up to %d, %d",
					rr.Name, v, got.Packets, got.Bytes, c.Packets, c.Bytes)
			}
		}
	}
	cs, err := l.Counters()
	if err != nil {
		return err
	}
	for c, v := range base {
		cs[c] = maps.CounterValue{Packets: cs[c].Packets - v.Packets, Bytes: cs[c].Bytes - v.Bytes}
	}
	deny := cs[maps.CounterDeny]
	deny.Packets += cs[maps.CounterDenyShadow].Packets
	deny.Bytes += cs[maps.CounterDenyShadow].Bytes
	// Short frames never ran.
	malformed := Counts{r.Malformed.Packets - r.Short.Packets, r.Malformed.Bytes - r.Short.Bytes}
	for _, c := range []struct {
		name string
		got  maps.CounterValue
		want Counts
	}{
		{"allow", cs[maps.CounterAllow], r.Allow},
		{"deny", deny, r.Deny},
		{"unmatched", cs[maps.CounterUnmatched], r.Unmatched},
		{"malformed", cs[maps.CounterMalformed], malformed},
		{"non-IP", cs[maps.CounterNonIP], r.NonIP},
		{"ban", maps.CounterValue{Packets: cs[maps.CounterBanDrop].Packets + cs[maps.CounterBanShadow].Packets,
			Bytes: cs[maps.CounterBanDrop].Bytes + cs[maps.CounterBanShadow].Bytes}, r.Banned},
		{"no request", noRequestJudged(r, cs), r.NoRequest},
	} {
		if c.got.Packets != c.want.Packets || c.got.Bytes != c.want.Bytes {
			return fmt.Errorf("%s: the program counted %d packets, %d bytes; its recorded decisions add up to %d, %d",
				c.name, c.got.Packets, c.got.Bytes, c.want.Packets, c.want.Bytes)
		}
	}
	return nil
}

// noRequestJudged is what the reflection guard dropped, or in a policy in
// shadow passed as a drop: what it counted in shadow for a check in shadow
// went on to the rules, which recorded their own decision.
func noRequestJudged(r *Report, cs map[maps.Counter]maps.CounterValue) maps.CounterValue {
	v := cs[maps.CounterNoRequest]
	if r.Policy != nil && r.Policy.Mode == policy.ModeShadow {
		v.Packets += cs[maps.CounterNoRequestShadow].Packets
		v.Bytes += cs[maps.CounterNoRequestShadow].Bytes
	}
	return v
}
