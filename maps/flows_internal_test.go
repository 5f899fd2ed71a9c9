// SPDX-License-Identifier: Apache-2.0

package maps

import (
	"testing"

	"github.com/xdplimit/xdplimit/gen"
)

// sigMask keeps exactly the fields the generation reads: the parser's
// outcome and the source always, a matched dimension's field, a first
// level's key port; never the frame length.
func TestSigMask(t *testing.T) {
	ones := [4]uint32{^uint32(0), ^uint32(0), ^uint32(0), ^uint32(0)}
	rule := func(kinds ...uint8) gen.XdplimitXdplRule {
		r := gen.XdplimitXdplRule{Nlevels: uint8(len(kinds))}
		for i, k := range kinds {
			r.Levels[i].KeyKind = k
		}
		return r
	}
	base := gen.XdplimitXdplPkt{Family: 0xff, Proto: 0xff, Ports: 0xff, Unparsed: 0xff, LongChain: 0xff, Icmp: 0xff, Saddr: ones}
	with := func(f func(*gen.XdplimitXdplPkt)) gen.XdplimitXdplPkt { m := base; f(&m); return m }
	for _, c := range []struct {
		name  string
		dims  uint32
		rules []gen.XdplimitXdplRule
		want  gen.XdplimitXdplPkt
	}{
		{"nothing matched", 0, []gen.XdplimitXdplRule{rule(KeySrc)}, base},
		{"dst port", DimProto | DimDport, []gen.XdplimitXdplRule{rule(KeySrc)},
			with(func(m *gen.XdplimitXdplPkt) { m.Dport = 0xffff })},
		{"src port key", 0, []gen.XdplimitXdplRule{rule(KeySrcSport)},
			with(func(m *gen.XdplimitXdplPkt) { m.Sport = 0xffff })},
		// The second level behind a global one is cached, so its key is read.
		{"src port key behind global", 0, []gen.XdplimitXdplRule{rule(KeyGlobal, KeySrcSport)},
			with(func(m *gen.XdplimitXdplPkt) { m.Sport = 0xffff })},
		// Any other later level's key is not: its refusals are not cached.
		{"dst port key, later level", 0, []gen.XdplimitXdplRule{rule(KeySrc, KeySrcDport)}, base},
		{"dst port key, third level", 0, []gen.XdplimitXdplRule{rule(KeyGlobal, KeySrc, KeySrcDport)}, base},
		{"signature fields", DimLen | DimTTL | DimTOS | DimICMPType | DimICMPCode | DimTCPFlags | DimVLAN,
			[]gen.XdplimitXdplRule{rule(KeySrc)}, with(func(m *gen.XdplimitXdplPkt) {
				m.Iplen, m.Ttl, m.Tos, m.IcmpType, m.IcmpCode, m.TcpFlags, m.Vlan = 0xffff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xffff
			})},
		{"destination", DimDst | DimSrc, nil, with(func(m *gen.XdplimitXdplPkt) { m.Daddr = ones })},
	} {
		if got := sigMask(c.dims, c.rules); got != c.want {
			t.Errorf("%s: mask %+v, want %+v", c.name, got, c.want)
		}
	}
}

// nextSeq is above both generations' and never 0.
func TestNextSeq(t *testing.T) {
	var ctl gen.XdplimitXdplControl
	ctl.Gen[0].Seq, ctl.Gen[1].Seq = 7, 3
	if got := nextSeq(&ctl); got != 8 {
		t.Errorf("nextSeq(7, 3) = %d, want 8", got)
	}
	ctl.Gen[0].Seq = ^uint32(0)
	if got := nextSeq(&ctl); got != 1 {
		t.Errorf("nextSeq after the wrap = %d, want 1", got)
	}
}
