// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"net/netip"
	"slices"
)

// checkRules runs the checks that compare rules with each other. Rules that
// had errors of their own are skipped: what they match is not known.
func (d *decoder) checkRules(rs []decodedRule) {
	for j, later := range rs {
		if !later.ok || later.Match.families() == 0 {
			continue // a rule that matches nothing has had its warning
		}
		for _, earlier := range rs[:j] {
			if earlier.ok && covers(earlier.Match, later.Match) {
				d.errorf(later.node, later.path,
					"rule %q can never apply: rule %q (line %d) comes first and matches every packet it matches",
					later.Name, earlier.Name, earlier.Line)
				break
			}
		}
	}
}

// covers reports whether a matches every packet b matches, so that a rule
// with match b placed after a rule with match a could never apply (the first
// matching rule wins). It compares dimension by dimension, an absent
// constraint being the whole dimension. Address sets are compared within
// the IP versions b can match at all: a b that only matches IPv4 packets
// (say through icmp or IPv4 dst_cidrs) is covered by src_cidrs [0.0.0.0/0].
// The result is exact for each dimension; it is false, never wrong, when
// only a combination of dimensions makes a cover b.
func covers(a, b Match) bool {
	if a.Protocol != ProtoAny && a.Protocol != b.Protocol {
		return false
	}
	fam := b.families()
	return coversCIDRs(a.SrcCIDRs, b.SrcCIDRs, fam) &&
		coversCIDRs(a.DstCIDRs, b.DstCIDRs, fam) &&
		coversRanges(a.SrcPorts, b.SrcPorts, 65535) &&
		coversRanges(a.DstPorts, b.DstPorts, 65535) &&
		coversFlags(a.TCPFlags, b.TCPFlags) &&
		listCovers(a.VLANs, b.VLANs) &&
		coversSignature(a, b) &&
		listCovers(a.SrcCountries, b.SrcCountries) && listCovers(a.SrcASNs, b.SrcASNs)
}

// listCovers compares lists of values where naming none means any: VLANs
// (b naming none matches untagged packets too), and countries or ASNs,
// compared by name before the databases are read (a country's networks
// are the same for both rules). a covers b when it names none, or b names
// some and only some of a's.
func listCovers[T comparable](a, b []T) bool {
	if len(a) == 0 {
		return true
	}
	if len(b) == 0 {
		return false
	}
	for _, v := range b {
		if !slices.Contains(a, v) {
			return false
		}
	}
	return true
}

func coversCIDRs(a, b []netip.Prefix, fam family) bool {
	if len(a) == 0 {
		return true
	}
	if len(b) == 0 {
		b = universe(fam)
	}
	for _, p := range b {
		if familyOf(p)&fam == 0 {
			continue // b can never match this entry anyway
		}
		if !coveredBy(p, a) {
			return false
		}
	}
	return true
}

// coversRanges relies on a and b being merged (see mergeRanges): a range of
// b is then covered only if one range of a contains it. No ranges is 0..top.
func coversRanges(a, b []Range, top uint16) bool {
	if len(a) == 0 {
		return true
	}
	if len(b) == 0 {
		b = []Range{{0, top}}
	}
	for _, r := range b {
		if !slices.ContainsFunc(a, func(q Range) bool { return q.Lo <= r.Lo && r.Hi <= q.Hi }) {
			return false
		}
	}
	return true
}

// coversFlags: b matches flag bytes with all of b.Set and none of b.Clear
// (never contradictory), including b.Set itself and b.Set plus any bit
// outside b.Clear; a accepts all of those exactly when it requires no more
// set bits and no more clear bits than b.
func coversFlags(a, b *TCPFlags) bool {
	if a == nil {
		return true
	}
	if b == nil {
		return a.Set == 0 && a.Clear == 0
	}
	return a.Set&^b.Set == 0 && a.Clear&^b.Clear == 0
}
