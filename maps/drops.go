package maps

import (
	"net/netip"

	"github.com/xdplimit/xdplimit/gen"
)

// NoLevel is DropSample.Level of a drop no rule level refused (deny list).
const NoLevel = -1

// CookieACKLevel is DropSample.Level of a TCP ACK dropped because the SYN
// cookie it carried back was wrong; Slot is then the syncookie rule's.
const CookieACKLevel = -2

// DropSample is one sampled dropped packet.
type DropSample struct {
	Source, Destination netip.Addr
	Verdict             Verdict
	// Slot is the counter slot of the rule that dropped it; Deny marks the
	// deny list, Ban a banned source.
	Slot uint32
	Deny bool
	Ban  bool
	// Level is the refusing level's place in the policy (0 = the rule's
	// own limit), or NoLevel, or CookieACKLevel.
	Level    int
	Bytes    uint32 // frame length
	IPLength uint16 // IP packet length
	Protocol uint8
	// HasPorts: SrcPort and DstPort are known (TCP, UDP, SCTP, UDP-Lite,
	// not a non-first fragment).
	HasPorts         bool
	SrcPort, DstPort uint16
	TTL              uint8 // or IPv6 hop limit
	TOS              uint8 // or IPv6 traffic class
	TCPFlags         uint8
}

// What a sample of the deny list or of a ban is named where a rule's name
// would go (metrics labels, top, the drop log). Policy rule names match
// [a-z0-9][a-z0-9_-]*, so a leading underscore never clashes.
const (
	ListDeny = "_deny"
	ListBan  = "_ban"
)

// ListName is the name s goes by in place of a rule's when the deny list
// or a ban refused it; ok is false for a rule's drop.
func (s DropSample) ListName() (name string, ok bool) {
	switch {
	case s.Deny:
		return ListDeny, true
	case s.Ban:
		return ListBan, true
	}
	return "", false
}

// DropRing reads the per-CPU rings of sampled drops. cursor is what the
// previous call returned (nil the first time); samples are those written
// since, at most the ring's size per CPU, with the number of samples each
// CPU wrote in the interval (more than returned when a ring wrapped).
// The map holds only what the datapath wrote: every reader (top, the drop
// log) keeps its own cursor, so any number read the ring at once.
func (l *Limiter) DropRing(cursor []uint64) (samples []DropSample, written uint64, next []uint64, err error) {
	var rings []gen.XdplimitXdplDropRing
	if err := l.objs.XdplDrops.Lookup(uint32(0), &rings); err != nil {
		return nil, 0, nil, err
	}
	const size = uint64(gen.XdplimitXdplConstXDPL_DROP_RING)
	next = make([]uint64, len(rings))
	for cpu, r := range rings {
		next[cpu] = r.Written
		var from uint64
		if cpu < len(cursor) {
			from = cursor[cpu]
		}
		if r.Written < from { // the maps were recreated
			from = 0
		}
		written += r.Written - from
		if r.Written-from > size {
			from = r.Written - size
		}
		for i := from; i < r.Written; i++ {
			samples = append(samples, dropSample(&r.S[i%size]))
		}
	}
	return samples, written, next, nil
}

func dropSample(s *gen.XdplimitXdplDropSample) DropSample {
	d := DropSample{Verdict: Verdict(s.Verdict), Slot: uint32(s.Slot), Bytes: s.Len,
		Deny:   uint32(s.Slot) == uint32(gen.XdplimitXdplConstXDPL_SAMPLE_DENY),
		Ban:    uint32(s.Slot) == uint32(gen.XdplimitXdplConstXDPL_SAMPLE_BAN),
		Source: addrOf(s.Family, s.Saddr), Destination: addrOf(s.Family, s.Daddr),
		Level: int(s.Level), IPLength: s.Iplen, Protocol: s.Proto, TTL: s.Ttl, TOS: s.Tos,
		TCPFlags: s.TcpFlags, HasPorts: s.Ports == portsOK}
	switch uint32(s.Level) {
	case uint32(gen.XdplimitXdplConstXDPL_SAMPLE_NO_LEVEL):
		d.Level = NoLevel
	case uint32(gen.XdplimitXdplConstXDPL_SAMPLE_COOKIE_ACK):
		d.Level = CookieACKLevel
	}
	if d.HasPorts {
		d.SrcPort, d.DstPort = s.Sport, s.Dport
	}
	return d
}

// portsOK is enum xdpl_ports' XDPL_PORTS_OK (parsing_defs.h, not in BTF).
const portsOK = 1
