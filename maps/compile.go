package maps

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"

	"github.com/xdplimit/xdplimit/gen"
	"github.com/xdplimit/xdplimit/model"
	"github.com/xdplimit/xdplimit/policy"
)

// Bitmap is the set of rules (by index in file order) a field value admits.
type Bitmap = gen.XdplimitXdplBitmap

// LevelSpec is one compiled limiter level before state ids are assigned.
type LevelSpec struct {
	Params      model.Params
	Bytes       bool
	KeyKind     uint8
	V4Prefix    int
	V6Prefix    int
	ToleranceNs uint64 // token bucket burst as time; windows: the window
	// Origin is the level's index in the policy (0 = the rule's own
	// limit); Levels are in evaluation order, which differs.
	Origin int
}

// RuleSpec is one compiled rule.
type RuleSpec struct {
	Name   string
	Shadow bool
	Levels []LevelSpec
}

// PrefixBitmap is an LPM entry of a classification trie.
type PrefixBitmap struct {
	Prefix netip.Prefix
	Rules  Bitmap
}

// Image is a whole policy in datapath form, independent of the generation
// it will be written to and of the state ids and counter slots the running
// limiter assigns.
type Image struct {
	Rules  []RuleSpec
	Dims   uint32
	Shadow bool

	Proto        []Bitmap // protoSlots entries, when dimProto is used
	DPort, SPort []Bitmap // portSlots entries
	TCPFlags     []Bitmap // tcpfSlots entries
	VLAN         []Bitmap // vlanSlots entries
	Src, Dst     []PrefixBitmap
	Allow, Deny  []netip.Prefix
	Unparsed     UnparsedSpec
}

func setBit(b *Bitmap, i int) { b.W[i/64] |= 1 << (i % 64) }

// Compile turns a validated policy into an Image. It fails only on what the
// datapath cannot represent; the policy package has already explained
// everything else to the user.
func Compile(p *policy.Policy) (*Image, error) {
	if len(p.Rules) > MaxRules {
		return nil, fmt.Errorf("%s: %d rules, the datapath holds %d", p.Path, len(p.Rules), MaxRules)
	}
	img := &Image{Shadow: p.Mode == policy.ModeShadow, Allow: p.Allow, Deny: p.Deny}
	for _, r := range p.Rules {
		rs, err := compileRule(r)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: rule %q: %w", p.Path, r.Line, r.Name, err)
		}
		rs.Shadow = rs.Shadow || img.Shadow
		img.Rules = append(img.Rules, rs)
	}
	rules := p.Rules

	// A dimension is looked up only when some rule constrains it.
	for _, r := range rules {
		m := r.Match
		if m.Protocol != policy.ProtoAny {
			img.Dims |= dimProto
		}
		if len(m.DstPorts) > 0 {
			img.Dims |= dimDport
		}
		if len(m.SrcPorts) > 0 {
			img.Dims |= dimSport
		}
		if len(m.SrcCIDRs) > 0 {
			img.Dims |= dimSrc
		}
		if len(m.DstCIDRs) > 0 {
			img.Dims |= dimDst
		}
		if m.TCPFlags != nil {
			img.Dims |= dimTCPF
		}
		if len(m.VLANs) > 0 {
			img.Dims |= dimVLAN
		}
	}
	if img.Dims&dimProto != 0 {
		img.Proto = make([]Bitmap, protoSlots)
		for i, r := range rules {
			for fam := 0; fam < 2; fam++ {
				for proto := 0; proto < 256; proto++ {
					if protoMatches(r.Match.Protocol, fam, proto) {
						setBit(&img.Proto[fam*256+proto], i)
					}
				}
			}
		}
	}
	if img.Dims&dimDport != 0 {
		img.DPort = portBitmaps(rules, func(m *policy.Match) []policy.PortRange { return m.DstPorts })
	}
	if img.Dims&dimSport != 0 {
		img.SPort = portBitmaps(rules, func(m *policy.Match) []policy.PortRange { return m.SrcPorts })
	}
	if img.Dims&dimTCPF != 0 {
		img.TCPFlags = make([]Bitmap, tcpfSlots)
		for i, r := range rules {
			f := r.Match.TCPFlags
			for v := uint32(0); v < tcpfSlots; v++ {
				var ok bool
				switch {
				case f == nil:
					ok = true
				case v == tcpfIdxFrag:
					// Non-first fragments carry no flags: judged as if
					// they matched, so fragmenting does not evade a rule.
					ok = true
				case v == tcpfIdxNone:
					ok = false
				default:
					ok = uint8(v)&f.Set == f.Set && uint8(v)&f.Clear == 0
				}
				if ok {
					setBit(&img.TCPFlags[v], i)
				}
			}
		}
	}
	if img.Dims&dimVLAN != 0 {
		img.VLAN = make([]Bitmap, vlanSlots)
		for i, r := range rules {
			if len(r.Match.VLANs) == 0 {
				for v := range img.VLAN {
					setBit(&img.VLAN[v], i)
				}
				continue
			}
			for _, v := range r.Match.VLANs {
				setBit(&img.VLAN[v], i)
			}
		}
	}
	if img.Dims&dimSrc != 0 {
		img.Src = prefixBitmaps(rules, func(m *policy.Match) []netip.Prefix { return m.SrcCIDRs })
	}
	if img.Dims&dimDst != 0 {
		img.Dst = prefixBitmaps(rules, func(m *policy.Match) []netip.Prefix { return m.DstCIDRs })
	}
	if err := compileUnparsed(img, p); err != nil {
		return nil, fmt.Errorf("%s: unparsed: %w", p.Path, err)
	}
	return img, nil
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
func portBitmaps(rules []policy.Rule, get func(*policy.Match) []policy.PortRange) []Bitmap {
	bm := make([]Bitmap, portSlots)
	for i := range rules {
		ranges := get(&rules[i].Match)
		if len(ranges) == 0 {
			for s := range bm {
				setBit(&bm[s], i)
			}
			continue
		}
		for _, pr := range ranges {
			for p := uint32(pr.Lo); p <= uint32(pr.Hi); p++ {
				setBit(&bm[p], i)
			}
		}
		setBit(&bm[portIdxFrag], i)
	}
	return bm
}

// prefixBitmaps builds LPM entries so that the longest prefix matching an
// address carries every rule that matches the address: each prefix any rule
// names, plus /0 per family, maps to the rules without a constraint on this
// dimension and the rules with a prefix containing it.
func prefixBitmaps(rules []policy.Rule, get func(*policy.Match) []netip.Prefix) []PrefixBitmap {
	set := map[netip.Prefix]bool{
		netip.PrefixFrom(netip.IPv4Unspecified(), 0): true,
		netip.PrefixFrom(netip.IPv6Unspecified(), 0): true,
	}
	for i := range rules {
		for _, p := range get(&rules[i].Match) {
			set[p.Masked()] = true
		}
	}
	var out []PrefixBitmap
	for p := range set {
		e := PrefixBitmap{Prefix: p}
		for i := range rules {
			cidrs := get(&rules[i].Match)
			if len(cidrs) == 0 {
				setBit(&e.Rules, i)
				continue
			}
			for _, c := range cidrs {
				if c.Addr().Is4() == p.Addr().Is4() && c.Bits() <= p.Bits() && c.Contains(p.Addr()) {
					setBit(&e.Rules, i)
					break
				}
			}
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b PrefixBitmap) int {
		if c := a.Prefix.Addr().Compare(b.Prefix.Addr()); c != 0 {
			return c
		}
		return a.Prefix.Bits() - b.Prefix.Bits()
	})
	return out
}

func compileRule(r policy.Rule) (RuleSpec, error) {
	rs := RuleSpec{Name: r.Name, Shadow: r.Action == policy.ActionShadow}
	if len(r.Levels) == 0 || len(r.Levels) > MaxLevels {
		return rs, fmt.Errorf("%d limit levels; the datapath evaluates 1 to %d", len(r.Levels), MaxLevels)
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
	slices.SortStableFunc(rs.Levels, func(a, b LevelSpec) int { return a.rank() - b.rank() })
	return rs, nil
}

func (ls LevelSpec) rank() int {
	switch ls.KeyKind {
	case keyGlobal:
		return 0
	case keySrc:
		return 1 + ls.V4Prefix
	}
	return 64 + ls.V4Prefix
}

func compileLevel(l policy.Level) (LevelSpec, error) {
	ls := LevelSpec{Bytes: l.Limit.Unit == policy.Bytes, V4Prefix: 32, V6Prefix: 128}
	switch l.Key.Kind {
	case policy.KeySrcIP:
		ls.KeyKind = keySrc
	case policy.KeySrcIPDstPort:
		ls.KeyKind = keySrcDport
	case policy.KeyGlobal:
		ls.KeyKind = keyGlobal
	default:
		return ls, fmt.Errorf("unknown key kind %v", l.Key.Kind)
	}
	if ls.KeyKind != keyGlobal {
		ls.V4Prefix, ls.V6Prefix = l.Key.IPv4Prefix, l.Key.IPv6Prefix
		if ls.V4Prefix < 0 || ls.V4Prefix > 32 || ls.V6Prefix < 0 || ls.V6Prefix > 128 {
			return ls, fmt.Errorf("key prefix /%d, /%d out of range", ls.V4Prefix, ls.V6Prefix)
		}
	}
	var err error
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
	default:
		err = fmt.Errorf("unknown algorithm %v", l.Limit.Algorithm)
	}
	return ls, err
}

// needsFineClock says whether a level's burst or window is too short for the
// coarse clock, which advances once per tick: a token bucket whose burst
// lasts less than a few ticks would lose refill each tick (a burst of 1 at
// 10k/s would admit one packet per 4 ms tick), and a window only a few ticks
// long would have its boundaries off by a large share.
func (ls LevelSpec) needsFineClock(tickNs uint64) bool {
	if ls.Params.Algorithm == model.AlgTokenBucket {
		return ls.ToleranceNs < 4*tickNs
	}
	return ls.ToleranceNs < 100*tickNs
}

// untrackedMax is the most a key without a state entry can pass at one level
// per second: track_after - 1 packets per CPU per sketch epoch.
func untrackedMax(trackAfter uint32, cpus int) float64 {
	epoch := float64(uint64(1)<<gen.XdplimitXdplConstXDPL_SKETCH_EPOCH_SHIFT) / 1e9
	return float64(trackAfter-1) * float64(cpus) / epoch
}

// maxFrameBytes is the frame size assumed for byte-counting levels when
// deciding whether the sketch may leave keys untracked (Ethernet MTU frames).
const maxFrameBytes = 1518

// trackFirst says whether a level must create state at a key's first
// packet: when an untracked key could pass more than half its limit, leaving
// keys untracked would let a source evade the limit by staying below the
// sketch's threshold.
func (ls LevelSpec) trackFirst(trackAfter uint32, cpus int) bool {
	if trackAfter <= 1 || ls.KeyKind == keyGlobal {
		return false
	}
	var rate float64 // units per second
	switch ls.Params.Algorithm {
	case model.AlgTokenBucket:
		rate = 1e9 * float64(uint64(1)<<model.FPShift) / float64(ls.Params.P1)
	default:
		rate = float64(ls.Params.P2) / (float64(ls.Params.P1) / 1e9)
	}
	untracked := untrackedMax(trackAfter, cpus)
	if ls.Bytes {
		untracked *= maxFrameBytes
	}
	return 2*untracked > rate
}

// prefixMask4 returns the IPv4 mask as the datapath compares it: network
// order bytes read as a native-endian u32, like the packet's address.
func prefixMask4(bits int) uint32 {
	var b [4]byte
	for i := 0; i < bits; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	return binary.NativeEndian.Uint32(b[:])
}

func prefixMask6(bits int) [4]uint32 {
	var b [16]byte
	for i := 0; i < bits; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	var m [4]uint32
	for i := range m {
		m[i] = binary.NativeEndian.Uint32(b[i*4:])
	}
	return m
}
