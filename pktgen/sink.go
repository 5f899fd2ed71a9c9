// SPDX-License-Identifier: Apache-2.0

package pktgen

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/xdplimit/xdplimit/gen"
	"github.com/xdplimit/xdplimit/internal/netns"
)

// Sink is an XDP program attached natively to the receiving end of a veth
// in tests that have no limiter there: without an XDP program on the peer,
// live frames are dropped silently.
type Sink struct {
	prog  *ebpf.Program
	stats *ebpf.Map // SinkCount only
	seen  *ebpf.Map // SinkCount only
	link  link.Link
}

// SinkMode selects the sink's program.
type SinkMode int

const (
	// SinkPass (xdpl_pass) passes every frame to the stack.
	SinkPass SinkMode = iota
	// SinkCount (xdpl_count) passes every frame, counting frames and
	// recording each source address (up to 65536) at some cost per frame.
	SinkCount
	// SinkDrop (xdpl_drop) drops every frame in XDP: for measuring the
	// generator without the receiving stack's work on the same CPUs.
	SinkDrop
)

// AttachSink attaches the mode's program in native mode to ifname in the
// namespace at netnsPath ("" for the caller's). Close detaches it.
func AttachSink(netnsPath, ifname string, mode SinkMode) (*Sink, error) {
	spec, err := gen.LoadPktgen()
	if err != nil {
		return nil, err
	}
	s := &Sink{}
	switch mode {
	case SinkCount:
		var o struct {
			Prog  *ebpf.Program `ebpf:"xdpl_count"`
			Stats *ebpf.Map     `ebpf:"pktgen_stats"`
			Seen  *ebpf.Map     `ebpf:"pktgen_seen"`
		}
		err = spec.LoadAndAssign(&o, nil)
		s.prog, s.stats, s.seen = o.Prog, o.Stats, o.Seen
	case SinkPass, SinkDrop:
		name := map[SinkMode]string{SinkPass: gen.PktgenProgXdplPass, SinkDrop: gen.PktgenProgXdplDrop}[mode]
		s.prog, err = ebpf.NewProgram(spec.Programs[name])
	default:
		return nil, fmt.Errorf("pktgen: unknown sink mode %d", mode)
	}
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("pktgen: load sink: %+v", ve)
		}
		return nil, fmt.Errorf("pktgen: load sink: %w", err)
	}

	err = netns.DoAt(netnsPath, func() error {
		ifindex, err := ifIndex(ifname)
		if err != nil {
			return err
		}
		s.link, err = link.AttachXDP(link.XDPOptions{Program: s.prog, Interface: ifindex, Flags: link.XDPDriverMode})
		return err
	})
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("pktgen: attach sink to %s: %w", ifname, err)
	}
	return s, nil
}

// Close detaches and unloads the sink.
func (s *Sink) Close() error {
	var errs []error
	if s.link != nil {
		errs = append(errs, s.link.Close())
	}
	for _, m := range []*ebpf.Map{s.stats, s.seen} {
		if m != nil {
			errs = append(errs, m.Close())
		}
	}
	if s.prog != nil {
		errs = append(errs, s.prog.Close())
	}
	return errors.Join(errs...)
}

// Received is the number of frames the sink has seen (SinkCount only).
func (s *Sink) Received() (uint64, error) {
	if s.stats == nil {
		return 0, errors.New("pktgen: sink does not count")
	}
	var per []uint64
	if err := s.stats.Lookup(uint32(gen.PktgenPktgenStatPKTGEN_STAT_RX), &per); err != nil {
		return 0, err
	}
	var sum uint64
	for _, v := range per {
		sum += v
	}
	return sum, nil
}

// Sources returns the frame count of every source address xdpl_count saw.
// IPv4 sources come back as IPv4 addresses (not IPv4-mapped).
func (s *Sink) Sources() (map[netip.Addr]uint64, error) {
	if s.seen == nil {
		return nil, errors.New("pktgen: sink does not count sources")
	}
	out := map[netip.Addr]uint64{}
	var (
		// struct pktgen_addr holds the address bytes in network order;
		// a byte array reads them as they are.
		key [16]byte
		n   uint64
	)
	it := s.seen.Iterate()
	for it.Next(&key, &n) {
		out[netip.AddrFrom16(key).Unmap()] = n
	}
	return out, it.Err()
}
