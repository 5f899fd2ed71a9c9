package crowdsec

import (
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// SkipReason says why a decision was not applied. Reasons marked logged are
// bad input from the LAPI or a failing Target: each is logged once per poll
// with a count and the first example, never once per decision.
type SkipReason string

const (
	SkipType      SkipReason = "type"      // a type not configured (captcha, ...)
	SkipFiltered  SkipReason = "filtered"  // outside the origin or scenario filters
	SkipScope     SkipReason = "scope"     // logged: a scope other than Ip and Range
	SkipValue     SkipReason = "value"     // logged: not an address (Ip) or a CIDR (Range)
	SkipDuration  SkipReason = "duration"  // logged: unparsable, zero or negative
	SkipTooWide   SkipReason = "too_wide"  // logged: shorter than the family's minimum prefix
	SkipMalformed SkipReason = "malformed" // logged: not a decision object
	SkipTarget    SkipReason = "target"    // logged: Target.Ban or Unban failed
)

// SkipReasons lists every reason, for metrics that show zeros.
var SkipReasons = []SkipReason{SkipType, SkipFiltered, SkipScope, SkipValue, SkipDuration,
	SkipTooWide, SkipMalformed, SkipTarget}

func (r SkipReason) logged() bool { return r != SkipType && r != SkipFiltered }

// Bounds of the strings passed to the Target, in bytes: those of a rule
// name and a ban's reason in the datapath's tables (maps.NameLen - 1 and
// maps.BanReasonLen; a test checks they agree).
const (
	MaxOriginLen = 63
	MaxReasonLen = 63
)

// action is a decision checked and ready for the Target.
type action struct {
	prefix netip.Prefix
	dur    time.Duration // new decisions only
	origin string
	reason string
}

// rules are the checks a Config sets.
type rules struct {
	types               map[string]bool // lower case
	scopes              map[string]bool // "ip", "range"
	origins             map[string]bool // empty: any
	containing, without []string        // lower case
	min4, min6          int
	minDur, maxDur      time.Duration
}

// check turns a decision into an action, or says why not. Deleted
// decisions skip the duration check: theirs is negative by nature.
func (r *rules) check(d *Decision, deleted bool) (action, SkipReason, error) {
	if !r.types[strings.ToLower(d.Type)] {
		return action{}, SkipType, nil
	}
	scope := strings.ToLower(d.Scope)
	if scope != "ip" && scope != "range" {
		return action{}, SkipScope, fmt.Errorf("unknown scope %q", d.Scope)
	}
	if !r.scopes[scope] || !r.admits(d) {
		return action{}, SkipFiltered, nil
	}
	p, err := parseValue(scope, d.Value)
	if err != nil {
		return action{}, SkipValue, err
	}
	if min := r.minBits(p); p.Bits() < min {
		return action{}, SkipTooWide, fmt.Errorf("%s is wider than /%d", p, min)
	}
	a := action{prefix: p, origin: Origin(d.Origin, d.Scenario),
		reason: clean(fmt.Sprintf("%s decision %d", d.Type, d.ID), MaxReasonLen)}
	if !deleted {
		dur, err := time.ParseDuration(d.Duration)
		if err != nil {
			return action{}, SkipDuration, fmt.Errorf("duration %q: %v", d.Duration, err)
		}
		if dur <= 0 {
			return action{}, SkipDuration, fmt.Errorf("duration %q is not positive", d.Duration)
		}
		a.dur = min(max(dur, r.minDur), r.maxDur)
	}
	return a, "", nil
}

// admits applies the origin and scenario filters on this side too: the
// LAPI applies them as well, but a server that ignores a parameter must
// not widen what is applied.
func (r *rules) admits(d *Decision) bool {
	if len(r.origins) > 0 && !r.origins[d.Origin] {
		return false
	}
	sc := strings.ToLower(d.Scenario)
	if len(r.containing) > 0 && !containsAny(sc, r.containing) {
		return false
	}
	return !containsAny(sc, r.without)
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

func (r *rules) minBits(p netip.Prefix) int {
	if p.Addr().Is4() {
		return r.min4
	}
	return r.min6
}

// parseValue parses an Ip decision's address or a Range decision's CIDR.
// IPv4-mapped IPv6 becomes IPv4, as everywhere in xdplimit (the datapath
// keys IPv4 packets by their 4-byte address), before any width check:
// ::ffff:0.0.0.0/96 is 0.0.0.0/0. Host bits of a range are masked off.
func parseValue(scope, v string) (netip.Prefix, error) {
	var p netip.Prefix
	if scope == "ip" {
		a, err := netip.ParseAddr(v)
		if err != nil || a.Zone() != "" {
			return p, fmt.Errorf("%q is not an IP address", v)
		}
		p = netip.PrefixFrom(a, a.BitLen())
	} else {
		var err error
		if p, err = netip.ParsePrefix(v); err != nil {
			return p, fmt.Errorf("%q is not a CIDR", v)
		}
	}
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}

// Origin is the origin a decision's ban carries: crowdsec/ORIGIN/SCENARIO
// ("crowdsec/cscli/manual 'ban' from 'host'", "crowdsec/CAPI/crowdsecurity/ssh-bf"),
// printable ASCII only (anything else becomes '?') and at most
// MaxOriginLen bytes. The LAPI's strings are free text from whoever added
// the decision; the ban table, logs and metrics must not carry control
// characters from them.
func Origin(origin, scenario string) string {
	return clean("crowdsec/"+origin+"/"+scenario, MaxOriginLen)
}

// clean replaces every rune outside printable ASCII by '?' and cuts the
// result to n bytes (one byte per rune after the replacement, so the cut
// never splits a character).
func clean(s string, n int) string {
	b := make([]byte, 0, min(len(s), n))
	for _, r := range s {
		if len(b) == n {
			break
		}
		if r < 0x20 || r > 0x7e {
			r = '?'
		}
		b = append(b, byte(r))
	}
	return string(b)
}
