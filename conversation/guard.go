// SPDX-License-Identifier: Apache-2.0

package conversation

import (
	"net/netip"
	"time"

	"github.com/xdplimit/xdplimit/maps"
)

// Guard decides, from a check's watch, when an under_attack check is
// armed: as soon as one destination receives Rate packets a second that
// the check would drop, and until every destination has stayed below half
// of that for Hold. The two thresholds keep an attack hovering at the rate
// from arming and disarming the check at every reading.
type Guard struct {
	Rate float64 // packets a second at one destination
	Hold time.Duration

	prev   []uint64
	prevAt time.Time
	armed  bool
	quiet  time.Time // since when every destination was below Rate/2, while armed
}

// Change is an arming or disarming, with the destination that caused it
// (the busiest one of the reading) and its rate.
type Change struct {
	Armed       bool
	Destination netip.Addr
	Protocol    uint8
	Port        uint16
	Rate        float64 // packets a second the check drops, or would drop
}

// Armed says whether the check is armed.
func (g *Guard) Armed() bool { return g.armed }

// Observe takes a reading of the watch at now and returns the change it
// makes, if any. The first reading only sets the baseline; a slot whose
// count went down (the limiter was replaced) counts from zero.
func (g *Guard) Observe(now time.Time, watch []maps.WatchSlot) *Change {
	defer func() {
		g.prev, g.prevAt = g.prev[:0], now
		for _, s := range watch {
			g.prev = append(g.prev, s.Packets)
		}
	}()
	if len(g.prev) != len(watch) || !now.After(g.prevAt) {
		return nil
	}
	dt := now.Sub(g.prevAt).Seconds()
	var top Change
	for i, s := range watch {
		d := s.Packets
		if d >= g.prev[i] {
			d -= g.prev[i]
		}
		if r := float64(d) / dt; r > top.Rate {
			top = Change{Destination: s.Destination, Protocol: s.Protocol, Port: s.Port, Rate: r}
		}
	}
	switch {
	case !g.armed && top.Rate >= g.Rate:
		g.armed, g.quiet = true, time.Time{}
		top.Armed = true
		return &top
	case !g.armed:
		return nil
	case top.Rate >= g.Rate/2:
		g.quiet = time.Time{}
		return nil
	case g.quiet.IsZero():
		g.quiet = now
		return nil
	case now.Sub(g.quiet) >= g.Hold:
		g.armed = false
		return &top
	}
	return nil
}

// Restore sets the guard armed (a check a previous process armed): it then
// disarms only after the hold below half the rate, as if it had armed it.
func (g *Guard) Restore(armed bool) { g.armed, g.quiet = armed, time.Time{} }
