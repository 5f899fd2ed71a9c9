// SPDX-License-Identifier: Apache-2.0

package maps

import (
	"net/netip"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/gen"
)

// NoLevel is DropSample.Level of a drop no rule level refused (deny list).
const NoLevel = -1

// CookieACKLevel is DropSample.Level of a TCP ACK dropped because the SYN
// cookie it carried back was wrong; Slot is then the syncookie rule's.
const CookieACKLevel = -2

// NoConnectionLevel and NoSocketLevel are DropSample.Level of a packet the
// conversation checks dropped: TCP that no socket owns, UDP to a port
// without a socket (bpf/conversation.h).
const (
	NoConnectionLevel = -3
	NoSocketLevel     = -4
	NoRequestLevel    = -5 // a reflector's answer to no request
)

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
	// own limit), or NoLevel, CookieACKLevel, NoConnectionLevel or
	// NoSocketLevel.
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
	// The conversation checks' drops (bpf/conversation.h).
	ListNoConnection = "_no_connection"
	ListNoSocket     = "_no_socket"
	ListNoRequest    = "_no_request"
)

// ListName is the name s goes by in place of a rule's when the deny list,
// a ban or a conversation check refused it; ok is false for a rule's drop.
func (s DropSample) ListName() (name string, ok bool) {
	switch {
	case s.Deny:
		return ListDeny, true
	case s.Ban:
		return ListBan, true
	case s.Level == NoConnectionLevel:
		return ListNoConnection, true
	case s.Level == NoSocketLevel:
		return ListNoSocket, true
	case s.Level == NoRequestLevel:
		return ListNoRequest, true
	}
	return "", false
}

// DropRing reads the rings of sampled drops. cursor is what the previous
// call returned (nil the first time); samples are those written since, at
// most a ring's size less one per CPU, with the number of samples each CPU
// wrote in the interval (more than returned when a ring wrapped, or when
// the datapath overwrote a sample while it was being read). A sample the
// datapath has counted but not yet published is left for the next call.
// The maps hold only what the datapath wrote: every reader (top, the drop
// log) keeps its own cursor, so any number read the rings at once.
// How a sample is read whole on any CPU: dropring.go.
func (l *Limiter) DropRing(cursor []uint64) (samples []DropSample, written uint64, next []uint64, err error) {
	heads, err := l.dropHeads()
	if err != nil {
		return nil, 0, nil, err
	}
	size := uint64(l.DropRingSize())
	var recs []gen.XdplimitXdplDropSample
	err = l.readDrops(func(mem []byte) {
		written, next = readRings(heads, cursor, size, func(cpu int, start, head uint64) (n uint64) {
			recs, n = readRing(mem, uint64(cpu)*size, size, start, head, recs)
			return n
		})
	})
	if err != nil {
		return nil, 0, nil, err
	}
	samples = make([]DropSample, len(recs))
	for k := range recs {
		samples[k] = dropSample(&recs[k])
	}
	return samples, written, next, nil
}

func (l *Limiter) dropHeads() ([]gen.XdplimitXdplDropRing, error) {
	var heads []gen.XdplimitXdplDropRing
	if err := l.objs.XdplDrops.Lookup(uint32(0), &heads); err != nil {
		return nil, err
	}
	return heads, nil
}

// dropSamples is the size of xdpl_drop_samples: a ring for each possible
// CPU of XDPL_DROP_RING_BUDGET samples spread over the CPUs, a power of
// two between XDPL_DROP_RING_MIN and _MAX. On two CPUs, 16384 each: at one
// in 64, a 100 ms poll keeps up with ~10 Mpps of drops on one CPU.
func dropSamples() uint32 {
	cpus := uint32(ebpf.MustPossibleCPU())
	n := uint32(gen.XdplimitXdplConstXDPL_DROP_RING_MAX)
	for n > uint32(gen.XdplimitXdplConstXDPL_DROP_RING_MIN) && n*cpus > uint32(gen.XdplimitXdplConstXDPL_DROP_RING_BUDGET) {
		n /= 2
	}
	return cpus * n
}

// DropRingSize is the number of samples each CPU's ring holds.
func (l *Limiter) DropRingSize() uint32 {
	return l.objs.XdplDropSamples.MaxEntries() / uint32(ebpf.MustPossibleCPU())
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
	case uint32(gen.XdplimitXdplConstXDPL_SAMPLE_NO_CONNECTION):
		d.Level = NoConnectionLevel
	case uint32(gen.XdplimitXdplConstXDPL_SAMPLE_NO_SOCKET):
		d.Level = NoSocketLevel
	case uint32(gen.XdplimitXdplConstXDPL_SAMPLE_NO_REQUEST):
		d.Level = NoRequestLevel
	}
	if d.HasPorts {
		d.SrcPort, d.DstPort = s.Sport, s.Dport
	}
	return d
}

// portsOK is enum xdpl_ports' XDPL_PORTS_OK (parsing_defs.h, not in BTF).
const portsOK = 1
