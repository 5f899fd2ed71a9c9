package maps

import (
	"net/netip"

	"github.com/xdplimit/xdplimit/gen"
)

// DropSample is one sampled dropped packet.
type DropSample struct {
	Source  netip.Addr
	Verdict Verdict
	// Slot is the counter slot of the rule that dropped it; Deny marks the
	// deny list, Ban a banned source.
	Slot  uint32
	Deny  bool
	Ban   bool
	Bytes uint32
}

// DropRing reads the per-CPU rings of sampled drops. cursor is what the
// previous call returned (nil the first time); samples are those written
// since, at most the ring's size per CPU, with the number of samples each
// CPU wrote in the interval (more than returned when a ring wrapped).
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
			s := r.S[i%size]
			d := DropSample{Verdict: Verdict(s.Verdict), Slot: uint32(s.Slot), Bytes: s.Len,
				Deny: uint32(s.Slot) == uint32(gen.XdplimitXdplConstXDPL_SAMPLE_DENY),
				Ban:  uint32(s.Slot) == uint32(gen.XdplimitXdplConstXDPL_SAMPLE_BAN)}
			d.Source = addrOf(s.Family, s.Addr)
			samples = append(samples, d)
		}
	}
	return samples, written, next, nil
}
