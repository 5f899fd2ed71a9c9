// SPDX-License-Identifier: Apache-2.0

// Package compiler turns a validated policy into the datapath's form, a
// maps.Image: one bitmap of rules per value of each classified field, LPM
// entries for prefixes, and each rule's levels as model parameters in
// evaluation order. It knows the policy language and the Image; it never
// touches a map.
package compiler

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/xdplimit/xdplimit/geoip"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/model"
	"github.com/xdplimit/xdplimit/policy"
)

// Compile turns a validated policy into an maps.Image. It fails only on what the
// datapath cannot represent; the policy package has already explained
// everything else to the user.
func Compile(p *policy.Policy) (*maps.Image, error) {
	if len(p.Rules) > maps.MaxRules {
		return nil, fmt.Errorf("%s: %d rules, the datapath holds %d", p.Path, len(p.Rules), maps.MaxRules)
	}
	img := &maps.Image{Shadow: p.Mode == policy.ModeShadow, Allow: p.Allow, Deny: p.Deny}
	img.SampleOneIn, _ = SampleOneIn(p.Log)
	img.TrafficOneIn = trafficOneIn(p)
	b := p.Bans
	img.BanLimits = maps.BanLimits{MinPrefix4: b.MinPrefixIPv4, MinPrefix6: b.MinPrefixIPv6,
		MaxImported: b.MaxImported, MaxPerSync: b.MaxPerSync, Set: true}
	for _, r := range p.Rules {
		rs, err := compileRule(r)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: rule %q: %w", p.Path, r.Line, r.Name, err)
		}
		rs.Shadow = rs.Shadow || img.Shadow
		img.Rules = append(img.Rules, rs)
	}
	img.Dims = usedDims(p.Rules)
	compileFields(img, p.Rules)
	if err := compilePayload(img, p.Rules); err != nil {
		return nil, fmt.Errorf("%s: %w", p.Path, err)
	}
	budget, err := compileLevel(policy.Level{Key: policy.Key{Kind: policy.KeyGlobal}, Limit: p.Reject.Budget})
	if err != nil {
		return nil, fmt.Errorf("%s: reject: %w", p.Path, err)
	}
	img.RejectBudget = &budget
	img.Conversations = compileConversations(p)
	if err := compileUnparsed(img, p); err != nil {
		return nil, fmt.Errorf("%s: unparsed: %w", p.Path, err)
	}
	return img, nil
}

// trafficOneIn is the datapath's one sampling of every verdict, shared by
// capture: and autopilot:: the more frequent of the two that are on, so
// that each sees at least the samples it asked for (0: neither is on).
func trafficOneIn(p *policy.Policy) uint32 {
	n := p.Capture.OneIn
	if a := p.Autopilot; a != nil && a.OneIn != 0 && (n == 0 || a.OneIn < n) {
		n = a.OneIn
	}
	return n
}

// usedDims are the dimensions some rule constrains: a dimension is looked
// up only then.
func usedDims(rules []policy.Rule) uint32 {
	var dims uint32
	for _, r := range rules {
		m := r.Match
		if m.Protocol != policy.ProtoAny {
			dims |= maps.DimProto
		}
		if len(m.DstPorts) > 0 {
			dims |= maps.DimDport
		}
		if len(m.SrcPorts) > 0 {
			dims |= maps.DimSport
		}
		if _, constrained := m.Sources(); constrained {
			dims |= maps.DimSrc
		}
		if len(m.DstCIDRs) > 0 {
			dims |= maps.DimDst
		}
		if m.TCPFlags != nil {
			dims |= maps.DimTCPFlags
		}
		if len(m.VLANs) > 0 {
			dims |= maps.DimVLAN
		}
	}
	return dims
}

// compileFields writes the bitmaps of every dimension img.Dims uses, and
// the signature fields'.
func compileFields(img *maps.Image, rules []policy.Rule) {
	if img.Dims&maps.DimProto != 0 {
		img.Proto = protoBitmaps(rules)
	}
	if img.Dims&maps.DimDport != 0 {
		img.DPort = portBitmaps(rules, func(m *policy.Match) []policy.PortRange { return m.DstPorts })
	}
	if img.Dims&maps.DimSport != 0 {
		img.SPort = portBitmaps(rules, func(m *policy.Match) []policy.PortRange { return m.SrcPorts })
	}
	if img.Dims&maps.DimTCPFlags != 0 {
		img.TCPFlags = tcpFlagBitmaps(rules)
	}
	if img.Dims&maps.DimVLAN != 0 {
		img.VLAN = vlanBitmaps(rules)
	}
	compileSignature(img, rules)
	if img.Dims&maps.DimSrc != 0 {
		img.Src = prefixBitmaps(rules, func(m *policy.Match) ([]netip.Prefix, bool) { return m.Sources() })
	}
	if img.Dims&maps.DimDst != 0 {
		img.Dst = prefixBitmaps(rules, func(m *policy.Match) ([]netip.Prefix, bool) { return m.DstCIDRs, len(m.DstCIDRs) > 0 })
	}
}

// protoBitmaps has a bitmap for each IP family and protocol number.
func protoBitmaps(rules []policy.Rule) []maps.Bitmap {
	bms := make([]maps.Bitmap, maps.ProtoSlots)
	for i, r := range rules {
		for fam := 0; fam < 2; fam++ {
			for proto := 0; proto < 256; proto++ {
				if protoMatches(r.Match.Protocol, fam, proto) {
					maps.SetBit(&bms[fam*256+proto], i)
				}
			}
		}
	}
	return bms
}

// tcpFlagBitmaps has a bitmap for each value of the TCP flags byte, and
// for a non-first fragment and a packet without TCP flags.
func tcpFlagBitmaps(rules []policy.Rule) []maps.Bitmap {
	bms := make([]maps.Bitmap, maps.TCPFlagSlots)
	for i, r := range rules {
		f := r.Match.TCPFlags
		for v := uint32(0); v < maps.TCPFlagSlots; v++ {
			var ok bool
			switch {
			case f == nil:
				ok = true
			case v == maps.TCPFlagIdxFrag:
				// Non-first fragments carry no flags: judged as if
				// they matched, so fragmenting does not evade a rule.
				ok = true
			case v == maps.TCPFlagIdxNone:
				ok = false
			default:
				ok = uint8(v)&f.Set == f.Set && uint8(v)&f.Clear == 0
			}
			if ok {
				maps.SetBit(&bms[v], i)
			}
		}
	}
	return bms
}

// vlanBitmaps has a bitmap for each VLAN ID; a rule that names none
// matches every one.
func vlanBitmaps(rules []policy.Rule) []maps.Bitmap {
	bms := make([]maps.Bitmap, maps.VLANSlots)
	for i, r := range rules {
		if len(r.Match.VLANs) == 0 {
			for v := range bms {
				maps.SetBit(&bms[v], i)
			}
			continue
		}
		for _, v := range r.Match.VLANs {
			maps.SetBit(&bms[v], i)
		}
	}
	return bms
}

func protoMatches(p policy.Protocol, fam, proto int) bool {
	switch p {
	case policy.ProtoAny:
		return true
	case policy.ProtoICMP:
		return fam == 0 && proto == 1
	case policy.ProtoICMPv6:
		return fam == 1 && proto == 58
	}
	return int(p) == proto
}

// portBitmaps: a rule without a port constraint matches every slot; one with
// a constraint matches its ports and non-first fragments (whose ports are
// unknown: they are limited as if the port matched, so fragmenting a flood
// does not evade the rule), never protocols without ports.
func portBitmaps(rules []policy.Rule, get func(*policy.Match) []policy.PortRange) []maps.Bitmap {
	bm := rangeBitmaps(rules, maps.PortSlots, get)
	for i := range rules {
		if len(get(&rules[i].Match)) > 0 {
			maps.SetBit(&bm[maps.PortIdxFrag], i)
		}
	}
	return bm
}

// rangeBitmaps: a rule without ranges matches every slot, one with ranges
// the values in them.
func rangeBitmaps(rules []policy.Rule, slots uint32, get func(*policy.Match) []policy.Range) []maps.Bitmap {
	bm := make([]maps.Bitmap, slots)
	for i := range rules {
		ranges := get(&rules[i].Match)
		if len(ranges) == 0 {
			for s := range bm {
				maps.SetBit(&bm[s], i)
			}
			continue
		}
		for _, r := range ranges {
			for v := uint32(r.Lo); v <= uint32(r.Hi); v++ {
				maps.SetBit(&bm[v], i)
			}
		}
	}
	return bm
}

// prefixBitmaps builds LPM entries so that the longest prefix matching an
// address carries every rule that matches the address: each prefix any rule
// names, plus /0 per family, maps to the rules without a constraint on this
// dimension and the rules with a prefix containing it. get returns a rule's
// prefixes and whether it constrains the dimension (a rule whose countries
// hold no network constrains it with none). A country's set is up to
// hundreds of thousands of prefixes: each entry looks each rule up in its
// merged prefixes with a binary search.
func prefixBitmaps(rules []policy.Rule, get func(*policy.Match) ([]netip.Prefix, bool)) []maps.PrefixBitmap {
	set := map[netip.Prefix]bool{
		netip.PrefixFrom(netip.IPv4Unspecified(), 0): true,
		netip.PrefixFrom(netip.IPv6Unspecified(), 0): true,
	}
	type constraint struct {
		rule  int
		cover []netip.Prefix // sorted, disjoint
	}
	var cons []constraint
	var free maps.Bitmap // the rules without a constraint
	for i := range rules {
		ps, constrained := get(&rules[i].Match)
		if !constrained {
			maps.SetBit(&free, i)
			continue
		}
		for _, p := range ps {
			set[p.Masked()] = true
		}
		cons = append(cons, constraint{i, geoip.MergeAll(ps)})
	}
	out := make([]maps.PrefixBitmap, 0, len(set))
	for p := range set {
		e := maps.PrefixBitmap{Prefix: p, Rules: free}
		for _, c := range cons {
			if covers(c.cover, p) {
				maps.SetBit(&e.Rules, c.rule)
			}
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b maps.PrefixBitmap) int { return a.Prefix.Compare(b.Prefix) })
	return out
}

// covers says whether a prefix of cover (sorted, disjoint) holds p: only
// the last one sorting at or before p can.
func covers(cover []netip.Prefix, p netip.Prefix) bool {
	i, _ := slices.BinarySearchFunc(cover, p, func(c, p netip.Prefix) int {
		if c.Compare(p) <= 0 {
			return -1
		}
		return 1
	})
	return i > 0 && cover[i-1].Bits() <= p.Bits() && cover[i-1].Contains(p.Addr())
}

func compileRule(r policy.Rule) (maps.RuleSpec, error) {
	rs := maps.RuleSpec{Name: r.Name, Shadow: r.Action == policy.ActionShadow, SynCookie: r.Action == policy.ActionSynCookie,
		Reject: r.Action == policy.ActionReject}
	if b := r.Ban; b != nil {
		rs.Ban = &maps.BanSpec{For: b.For, V4Bits: b.IPv4Prefix, V6Bits: b.IPv6Prefix}
	}
	if len(r.Levels) == 0 || len(r.Levels) > maps.MaxLevels {
		return rs, fmt.Errorf("%d limit levels; the datapath evaluates 1 to %d", len(r.Levels), maps.MaxLevels)
	}
	for i, l := range r.Levels {
		ls, err := compileLevel(l)
		if err != nil {
			if i == 0 {
				return rs, fmt.Errorf("limit: %w", err)
			}
			return rs, fmt.Errorf("aggregate[%d]: %w", i-1, err)
		}
		ls.Origin = i
		rs.Levels = append(rs.Levels, ls)
	}
	// Evaluate the levels that reject a flood cheapest first: a global
	// bucket is one hot entry, a short prefix few entries; the per-source
	// table, where a spoofed flood would insert, comes last.
	slices.SortStableFunc(rs.Levels, func(a, b maps.LevelSpec) int { return rank(a) - rank(b) })
	return rs, nil
}

func compileLevel(l policy.Level) (maps.LevelSpec, error) {
	ls := maps.LevelSpec{Bytes: l.Limit.Unit == policy.Bytes, V4Prefix: 32, V6Prefix: 128}
	switch l.Key.Kind {
	case policy.KeySrcIP:
		ls.KeyKind = maps.KeySrc
	case policy.KeySrcIPDstPort:
		ls.KeyKind = maps.KeySrcDport
	case policy.KeyGlobal:
		ls.KeyKind = maps.KeyGlobal
	case policy.KeySrcIPSrcPort:
		ls.KeyKind = maps.KeySrcSport
	default:
		return ls, fmt.Errorf("unknown key kind %v", l.Key.Kind)
	}
	if ls.KeyKind != maps.KeyGlobal {
		ls.V4Prefix, ls.V6Prefix = l.Key.IPv4Prefix, l.Key.IPv6Prefix
		if ls.V4Prefix < 0 || ls.V4Prefix > 32 || ls.V6Prefix < 0 || ls.V6Prefix > 128 {
			return ls, fmt.Errorf("key prefix /%d, /%d out of range", ls.V4Prefix, ls.V6Prefix)
		}
	}
	var err error
	ls.Fleet = l.Limit.Scope == policy.ScopeFleet
	switch l.Limit.Algorithm {
	case policy.TokenBucket:
		ls.Params, err = model.TokenBucketParams(l.Limit.Count, l.Limit.Per, l.Limit.Burst, ls.Bytes)
		ls.ToleranceNs = ls.Params.ToleranceNs()
	case policy.FixedWindow:
		ls.Params, err = model.WindowParams(model.AlgFixedWindow, l.Limit.Count, l.Limit.Window)
		ls.ToleranceNs = uint64(l.Limit.Window)
	case policy.SlidingWindow:
		ls.Params, err = model.WindowParams(model.AlgSlidingWindow, l.Limit.Count, l.Limit.Window)
		ls.ToleranceNs = uint64(l.Limit.Window)
	case policy.SlidingLog:
		ls.Params, err = model.SlidingLogParams(l.Limit.Count, l.Limit.Window)
		ls.ToleranceNs = uint64(l.Limit.Window)
	default:
		err = fmt.Errorf("unknown algorithm %v", l.Limit.Algorithm)
	}
	return ls, err
}

// rank orders levels for evaluation: global first, then per-source keys by
// prefix length, then src_ip+dst_port keys.
func rank(ls maps.LevelSpec) int {
	switch ls.KeyKind {
	case maps.KeyGlobal:
		return 0
	case maps.KeySrc:
		return 1 + ls.V4Prefix
	}
	return 64 + ls.V4Prefix
}

// compileConversations turns the conversations: section into the checks'
// flags; whether an under_attack check is armed is the agent's, at run
// time. In mode shadow every check is in shadow too.
func compileConversations(p *policy.Policy) maps.Conversations {
	check := func(c policy.ConvCheck) maps.ConvCheck {
		on := c.When != policy.WhenOff
		return maps.ConvCheck{On: on, Always: c.When == policy.WhenAlways,
			Shadow: c.Shadow || p.Mode == policy.ModeShadow, Conntrack: on && c.Conntrack}
	}
	c := p.Conversations
	out := maps.Conversations{TCP: check(c.TCP), UDP: check(c.UDP), Reflection: check(c.Reflection),
		ReflectionWindow: c.Window, EchoReplies: c.EchoReplies}
	if c.Reflection.When != policy.WhenOff {
		for _, r := range c.ReflectorPorts {
			for port := int(r.Lo); port <= int(r.Hi); port++ {
				out.ReflectorPorts = append(out.ReflectorPorts, uint16(port))
			}
		}
	}
	return out
}
