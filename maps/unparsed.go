// SPDX-License-Identifier: Apache-2.0

package maps

import (
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/gen"
)

// UnparsedKind says why the parser could not judge a frame.
type UnparsedKind int

const (
	UnparsedTruncated   = UnparsedKind(gen.XdplimitXdplConstXDPL_UP_TRUNCATED)
	UnparsedBadLength   = UnparsedKind(gen.XdplimitXdplConstXDPL_UP_BAD_LENGTH)
	UnparsedBadHeader   = UnparsedKind(gen.XdplimitXdplConstXDPL_UP_BAD_HEADER)
	UnparsedBadChecksum = UnparsedKind(gen.XdplimitXdplConstXDPL_UP_BAD_CHECKSUM)
	UnparsedVLANTags    = UnparsedKind(gen.XdplimitXdplConstXDPL_UP_TOO_MANY_VLAN_TAGS)
	// UnparsedLongChain: more IPv6 extension headers than the parser
	// follows. Such packets are judged by the rules (as fragments); they
	// are only counted with the unparsed kinds.
	UnparsedLongChain = UnparsedKind(gen.XdplimitXdplConstXDPL_UP_TOO_MANY_HEADERS)
	// UnparsedKinds is the number of kinds.
	UnparsedKinds = int(gen.XdplimitXdplConstXDPL_UP_KINDS)
)

var unparsedNames = []string{"truncated", "bad_length", "bad_header", "bad_checksum", "too_many_vlan_tags", "too_many_headers"}

func (k UnparsedKind) String() string {
	if k >= 0 && int(k) < len(unparsedNames) {
		return unparsedNames[k]
	}
	return fmt.Sprintf("unparsed(%d)", int(k))
}

// UnparsedValue counts one kind of unparsed frame, summed over CPUs.
type UnparsedValue struct {
	Packets, Bytes        uint64
	Dropped, DroppedBytes uint64 // by the policy's unparsed action or limit
}

// UnparsedCounters reads the unparsed frames by kind.
func (l *Limiter) UnparsedCounters() ([]UnparsedValue, error) {
	out := make([]UnparsedValue, UnparsedKinds)
	var vals []gen.XdplimitXdplUnparsedStats
	for i := range out {
		if err := l.objs.XdplUnparsedCounts.Lookup(uint32(i), &vals); err != nil {
			return nil, fmt.Errorf("reading unparsed counter %v: %w", UnparsedKind(i), err)
		}
		for _, v := range vals {
			out[i].Packets += v.Packets
			out[i].Bytes += v.Bytes
			out[i].Dropped += v.Dropped
			out[i].DroppedBytes += v.DroppedBytes
		}
	}
	return out, nil
}

// writeUnparsed writes generation next's unparsed section. The limit's one
// bucket keeps its state when the limit in force (generation cur) is the
// same, and starts full otherwise.
func (l *Limiter) writeUnparsed(cur, next uint32, u UnparsedSpec) error {
	var old, cfg gen.XdplimitXdplUnparsedCfg
	if err := l.objs.XdplUnparsedCfgs.Lookup(cur, &old); err != nil {
		return err
	}
	if u.Drop {
		cfg.Action = uint32(VerdictDrop)
	}
	if ls := u.Limit; ls != nil {
		cfg.Limited = 1
		lv := &cfg.Level
		lv.Algorithm = ls.Params.Algorithm
		lv.KeyKind = KeyGlobal
		lv.P1, lv.P2, lv.P3 = ls.Params.P1, ls.Params.P2, ls.Params.P3
		if ls.Bytes {
			lv.Flags |= lfBytes
		}
		if l.clock == ClockCoarse && ls.needsFineClock(l.tickNs) {
			lv.Flags |= lfFineClock
		}
	}
	if cfg.Limited == 0 || old.Limited == 0 || !sameLimit(old.Level, cfg.Level) {
		if err := l.objs.XdplUnparsedState.Update(uint32(0), &gen.XdplimitXdplState{}, ebpf.UpdateAny); err != nil {
			return err
		}
	}
	return l.objs.XdplUnparsedCfgs.Update(next, &cfg, ebpf.UpdateAny)
}

// Parsed is what the parser found in the last packet (Options.Record).
type Parsed struct {
	Family   uint8 // 4 or 6; 0 when no IP header was parsed
	Proto    uint8
	Ports    bool // Sport and Dport are known
	Fragment bool // a non-first fragment, or a packet of unknown transport header
	Sport    uint16
	Dport    uint16
	TCPFlags uint8
	VLAN     int // outer VID, or -1 untagged
	Source   netip.Addr
	// Unparsed is the kind of a frame the parser gave up on, or -1.
	Unparsed  UnparsedKind
	LongChain bool
	// Payload is where the transport payload starts in the frame, and
	// PayloadLen its bytes (payload matches); both 0 in a fragment.
	Payload, PayloadLen int
}

// LastParse reads what the parser found in the last packet.
func (l *Limiter) LastParse() (Parsed, error) {
	var d gen.XdplimitXdplDecision
	if err := l.objs.XdplLast.Lookup(uint32(0), &d); err != nil {
		return Parsed{}, err
	}
	p := d.Pkt
	out := Parsed{Family: p.Family, Proto: p.Proto, Sport: p.Sport, Dport: p.Dport, TCPFlags: p.TcpFlags,
		VLAN: int(p.Vlan), Unparsed: UnparsedKind(int(p.Unparsed) - 1), LongChain: p.LongChain != 0,
		Payload: int(p.Payload), PayloadLen: int(p.PayloadLen)}
	out.Ports = p.Ports == 1
	out.Fragment = p.Ports == 2
	if p.Vlan == uint16(gen.XdplimitXdplConstXDPL_VLAN_IDX_UNTAGGED) {
		out.VLAN = -1
	}
	out.Source = addrOf(p.Family, p.Saddr)
	return out, nil
}
