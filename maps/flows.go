// SPDX-License-Identifier: Apache-2.0

package maps

import (
	"fmt"
	"math/rand/v2"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/gen"
)

// The flow cache (bpf/flows.h) drops a known flow over its limit before the
// lists, the bans and the classifier. It is keyed by the packet fields a
// generation reads, and an entry holds only under the generation (Seq) and
// the ban epoch it was learned under: this file gives the datapath those
// three things.

// sigMask is the generation's mask of the packet fields (all ones where
// read): what its rules match on, and what the levels whose refusals the
// cache copies key on (a rule's first level, and its second behind a
// global one). Two packets equal under it get the same rule and the same
// keys at those levels. The fields that tell the parser's outcome (family,
// protocol, whether ports and ICMP fields were read) are always in it;
// the frame length (a byte-counting level's cost, never cached) never is.
func sigMask(dims uint32, rules []gen.XdplimitXdplRule) gen.XdplimitXdplPkt {
	m := gen.XdplimitXdplPkt{
		Family: 0xff, Proto: 0xff, Ports: 0xff, Unparsed: 0xff, LongChain: 0xff, Icmp: 0xff,
		Saddr: [4]uint32{^uint32(0), ^uint32(0), ^uint32(0), ^uint32(0)},
	}
	on := func(d uint32) bool { return dims&d != 0 }
	keyed := func(kind uint8) bool {
		for _, r := range rules {
			if r.Nlevels > 0 && r.Levels[0].KeyKind == kind {
				return true
			}
			if r.Nlevels == 2 && r.Levels[0].KeyKind == KeyGlobal && r.Levels[1].KeyKind == kind {
				return true
			}
		}
		return false
	}
	if on(DimTCPFlags) {
		m.TcpFlags = 0xff
	}
	if on(DimSport) || keyed(KeySrcSport) {
		m.Sport = 0xffff
	}
	if on(DimDport) || keyed(KeySrcDport) {
		m.Dport = 0xffff
	}
	if on(DimVLAN) {
		m.Vlan = 0xffff
	}
	if on(DimLen) {
		m.Iplen = 0xffff
	}
	if on(DimTTL) {
		m.Ttl = 0xff
	}
	if on(DimTOS) {
		m.Tos = 0xff
	}
	if on(DimICMPType) {
		m.IcmpType = 0xff
	}
	if on(DimICMPCode) {
		m.IcmpCode = 0xff
	}
	if on(DimDst) {
		m.Daddr = m.Saddr
	}
	return m
}

// noSourceFlows says whether the flow cache may also hold refusals keyed
// without the source (bpf/flows.h, XDPL_GF_NO_SOURCE_FLOWS): some rule's
// first level is a global one whose refusals it copies (counting packets,
// not bytes; in a rule that does not ban), and no rule picks packets by
// their source address, so that the source changes neither the rule nor
// that level's verdict. The lists and the bans, which do depend on the
// source, are looked up before such an entry.
func noSourceFlows(dims uint32, rules []gen.XdplimitXdplRule) bool {
	if dims&DimSrc != 0 {
		return false
	}
	for _, r := range rules {
		if r.Nlevels > 0 && r.Levels[0].KeyKind == KeyGlobal && r.Levels[0].Flags&lfBytes == 0 &&
			r.Flags&rfBan == 0 {
			return true
		}
	}
	return false
}

// nextSeq is the sequence number of the next generation written after ctl:
// above both generations' (never 0, which the datapath reads as "no flow
// cache"), so that nothing a flow cache learned under either holds.
func nextSeq(ctl *gen.XdplimitXdplControl) uint32 {
	s := max(ctl.Gen[0].Seq, ctl.Gen[1].Seq) + 1
	if s == 0 {
		s = 1
	}
	return s
}

// moveBanEpoch voids every flow cache entry learned before a ban the
// control plane just added: a fresh random value, not an increment, so
// that two processes adding bans at once cannot write the same value back.
func (l *Limiter) moveBanEpoch() error {
	var e gen.XdplimitXdplBanEpoch
	if err := l.objs.XdplBanEpoch.Lookup(uint32(0), &e); err != nil {
		return fmt.Errorf("reading the ban epoch: %w", err)
	}
	for old := e.Control; e.Control == old; {
		e.Control = rand.Uint64()
	}
	// Only the control half is ours; a datapath increment racing with this
	// write may be lost, but the value still differs from every one an
	// entry was learned under.
	if err := l.objs.XdplBanEpoch.Update(uint32(0), &e, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("moving the ban epoch: %w", err)
	}
	return nil
}
