// SPDX-License-Identifier: Apache-2.0

package crowdsec

import (
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// SkipReason says why a decision was not passed to the Target. Reasons
// marked logged are bad input from the LAPI: each is logged once per poll
// with a count and the first example, never once per decision. What the
// ban table's gate refuses (too wide, too long) is the Target's to count.
type SkipReason string

const (
	SkipType      SkipReason = "type"      // a type not configured (captcha, ...)
	SkipFiltered  SkipReason = "filtered"  // outside the origin or scenario filters
	SkipScope     SkipReason = "scope"     // logged: a scope other than Ip and Range
	SkipValue     SkipReason = "value"     // logged: not an address (Ip) or a CIDR (Range)
	SkipDuration  SkipReason = "duration"  // logged: unparsable, zero or negative
	SkipMalformed SkipReason = "malformed" // logged: not a decision object
)

// SkipReasons lists every reason, for metrics that show zeros.
var SkipReasons = []SkipReason{SkipType, SkipFiltered, SkipScope, SkipValue, SkipDuration, SkipMalformed}

func (r SkipReason) logged() bool { return r != SkipType && r != SkipFiltered }

// rules are the checks a Config sets.
type rules struct {
	types               map[string]bool // lower case
	scopes              map[string]bool // "ip", "range"
	origins             map[string]bool // empty: any
	containing, without []string        // lower case
}

// check turns a decision into a Ban for the Target, or says why not.
// Deleted decisions skip the duration check: theirs is negative by nature.
func (r *rules) check(d *Decision, deleted bool) (Ban, SkipReason, error) {
	if !r.types[strings.ToLower(d.Type)] {
		return Ban{}, SkipType, nil
	}
	scope := strings.ToLower(d.Scope)
	if scope != "ip" && scope != "range" {
		return Ban{}, SkipScope, fmt.Errorf("unknown scope %q", d.Scope)
	}
	if !r.scopes[scope] || !r.admits(d) {
		return Ban{}, SkipFiltered, nil
	}
	p, err := parseValue(scope, d.Value)
	if err != nil {
		return Ban{}, SkipValue, err
	}
	b := Ban{ID: d.ID, Prefix: p, Type: d.Type, Origin: d.Origin, Scenario: d.Scenario}
	if !deleted {
		dur, err := time.ParseDuration(d.Duration)
		if err != nil {
			return Ban{}, SkipDuration, fmt.Errorf("duration %q: %v", d.Duration, err)
		}
		if dur <= 0 {
			return Ban{}, SkipDuration, fmt.Errorf("duration %q is not positive", d.Duration)
		}
		b.Left = dur
	}
	return b, "", nil
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

// parseValue parses an Ip decision's address (as a host prefix) or a Range
// decision's CIDR, strictly: a zone, an address given as a range or a
// range given as an address is refused. The prefix goes to the Target as
// written; the ban table's gate masks it, reads IPv4-mapped IPv6 as IPv4
// and judges its width (banfeed.Check).
func parseValue(scope, v string) (netip.Prefix, error) {
	if scope == "ip" {
		a, err := netip.ParseAddr(v)
		if err != nil || a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("%q is not an IP address", v)
		}
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(v)
	if err != nil {
		return p, fmt.Errorf("%q is not a CIDR", v)
	}
	return p, nil
}
