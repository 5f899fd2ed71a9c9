// SPDX-License-Identifier: Apache-2.0

package compiler

import (
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/policy"
)

// compileSignature adds the dimensions of the signature fields (length,
// ttl, dscp or tos, icmp) that some rule constrains, each a direct array
// indexed by the packet's value: one lookup per used field, whatever the
// rules' ranges, and none for a policy that uses none of them.
func compileSignature(img *maps.Image, rules []policy.Rule) {
	for _, r := range rules {
		m := r.Match
		if len(m.Length) > 0 {
			img.Dims |= maps.DimLen
		}
		if len(m.TTL) > 0 {
			img.Dims |= maps.DimTTL
		}
		if len(m.DSCP) > 0 || len(m.TOS) > 0 {
			img.Dims |= maps.DimTOS
		}
		if m.ICMP != nil && m.ICMP.Types != nil {
			img.Dims |= maps.DimICMPType
		}
		if m.ICMP != nil && m.ICMP.Codes != nil {
			img.Dims |= maps.DimICMPCode
		}
	}
	if img.Dims&maps.DimLen != 0 {
		img.Len = rangeBitmaps(rules, maps.LenSlots, func(m *policy.Match) []policy.Range { return m.Length })
	}
	if img.Dims&maps.DimTTL != 0 {
		img.TTL = rangeBitmaps(rules, maps.TTLSlots, func(m *policy.Match) []policy.Range { return m.TTL })
	}
	if img.Dims&maps.DimTOS != 0 {
		img.TOS = make([]maps.Bitmap, maps.TOSSlots)
		for i, r := range rules {
			for v := range img.TOS {
				if r.Match.MatchesTOS(uint8(v)) {
					maps.SetBit(&img.TOS[v], i)
				}
			}
		}
	}
	if img.Dims&maps.DimICMPType != 0 {
		img.ICMPType = icmpBitmaps(rules, func(ic *policy.ICMP) []policy.Range { return ic.Types })
	}
	if img.Dims&maps.DimICMPCode != 0 {
		img.ICMPCode = icmpBitmaps(rules, func(ic *policy.ICMP) []policy.Range { return ic.Codes })
	}
}

// icmpBitmaps: a rule without the constraint matches every slot; one with
// it matches each value its ranges hold and messages whose type and code
// are unknown (a non-first fragment, a header cut short), as ports do,
// never packets that are not ICMP.
func icmpBitmaps(rules []policy.Rule, get func(*policy.ICMP) []policy.Range) []maps.Bitmap {
	bm := make([]maps.Bitmap, maps.ICMPSlots)
	for i, r := range rules {
		var rs []policy.Range
		if r.Match.ICMP != nil {
			rs = get(r.Match.ICMP)
		}
		if rs == nil {
			for s := range bm {
				maps.SetBit(&bm[s], i)
			}
			continue
		}
		for _, rg := range rs {
			for v := int(rg.Lo); v <= int(rg.Hi); v++ {
				maps.SetBit(&bm[v], i)
			}
		}
		maps.SetBit(&bm[maps.ICMPIdxFrag], i)
	}
	return bm
}
