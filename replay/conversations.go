// SPDX-License-Identifier: Apache-2.0

// The conversation checks in a replay. The tcp and udp checks ask the
// kernel's sockets, which in a replay are those of the host running it,
// not of the captured one: they are not replayed, and the report says so.
// The reflection guard is replayed whole from the capture itself: the
// frames the captured host sent go through the egress program, which
// records its requests, and the frames it received through the XDP
// program, which judges the answers against them.

package replay

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/maps"
)

// convReplay is the replayer's state for the reflection guard.
type convReplay struct {
	egress *ebpf.Program  // nil when the policy has no reflection guard
	local  []netip.Prefix // the captured host's addresses
}

// prepareConversations turns the checks that cannot be replayed off in
// img, and for the reflection guard gives the program the captured host's
// addresses (opts.Local, and every source of a frame it sent, as they
// come) and loads the egress program.
func (r *replayer) prepareConversations(img *maps.Image) error {
	cv := &img.Conversations
	for _, c := range []struct {
		name string
		on   *maps.ConvCheck
	}{{"tcp", &cv.TCP}, {"udp", &cv.UDP}} {
		if c.on.On {
			r.rep.NotReplayed = append(r.rep.NotReplayed, c.name)
			*c.on = maps.ConvCheck{}
		}
	}
	r.conv.local = slices.Clone(r.opts.Local)
	if !cv.Reflection.On {
		return nil
	}
	img.Local = append(make([]netip.Prefix, 0, len(r.conv.local)), r.conv.local...)
	eg, err := r.l.EgressProgram()
	if err != nil {
		return err
	}
	r.conv.egress = eg
	return nil
}

// sentByHost says whether the captured host sent f: the capture says so,
// or its source is one of the addresses given as the host's.
func (r *replayer) sentByHost(f Frame) bool {
	if f.Outgoing {
		return true
	}
	src := sourceOf(f.Data)
	for _, p := range r.opts.Local {
		if src.IsValid() && p.Contains(src) {
			return true
		}
	}
	return false
}

// recordSent runs a frame the captured host sent through the egress
// program at its time in the capture, so that the requests among them
// are known to the guard; the frame's source joins the host's addresses.
func (r *replayer) recordSent(f Frame, off time.Duration) error {
	if r.conv.egress == nil || len(f.Data) < ethHeaderLen {
		return nil
	}
	if src := sourceOf(f.Data); src.IsValid() {
		host := netip.PrefixFrom(src, src.BitLen())
		if !slices.Contains(r.conv.local, host) {
			r.conv.local = append(r.conv.local, host)
			if err := r.l.SetLocal(r.conv.local); err != nil {
				return fmt.Errorf("frame %d: %w", f.Number, err)
			}
		}
	}
	if err := r.l.SetClock(clockAt(off)); err != nil {
		return fmt.Errorf("frame %d: setting the clock: %w", f.Number, err)
	}
	if _, err := r.conv.egress.Run(&ebpf.RunOptions{Data: f.Data, Repeat: 1}); err != nil {
		return fmt.Errorf("frame %d: running the egress program: %w", f.Number, err)
	}
	return nil
}

// requestsRecorded reads how many requests the egress program recorded.
func (r *replayer) requestsRecorded(base map[maps.Counter]maps.CounterValue) error {
	cs, err := r.l.Counters()
	if err != nil {
		return err
	}
	r.rep.RequestsRecorded = cs[maps.CounterRequests].Packets - base[maps.CounterRequests].Packets
	return nil
}
