// SPDX-License-Identifier: Apache-2.0

package replay

import "time"

// ClockStart is the injected time of the first frame. Later frames run at
// ClockStart plus their capture time since the first (stamped) frame, exact
// to the capture's resolution. Capture timestamps themselves cannot be the clock:
// wall-clock nanoseconds overflow the datapath's fixed-point token bucket
// arithmetic, which expects a clock counting from boot. The margin lets
// frames stamped up to an hour before the first one (merged captures) run
// at their own time.
const ClockStart = time.Hour

// captureClock turns capture timestamps into offsets from the first one.
// A frame without a timestamp (a pcapng simple packet block) runs at the
// time of the frame before it; one before any stamped frame runs at offset
// zero, and the first stamped frame then starts the clock, so that a
// capture opening with simple packet blocks still runs on a clock that
// starts at zero.
type captureClock struct {
	first, prev time.Time // zero until a stamped frame
}

// at is the offset of a frame stamped ts (zero: none), counting what the
// report notes about timestamps.
func (c *captureClock) at(ts time.Time, r *Report) time.Duration {
	if ts.IsZero() {
		r.NoTime++
		if c.prev.IsZero() {
			return 0
		}
		return c.prev.Sub(c.first)
	}
	if c.first.IsZero() {
		c.first, r.First = ts, ts
	} else if ts.Before(c.prev) {
		r.Backwards++
	}
	c.prev, r.Last = ts, ts
	return ts.Sub(c.first)
}

// clockAt is the injected time of a frame captured off after the first.
func clockAt(off time.Duration) uint64 {
	if off < -ClockStart {
		return 0
	}
	return uint64(ClockStart + off)
}
