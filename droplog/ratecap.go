// SPDX-License-Identifier: Apache-2.0

package droplog

import "time"

// rateCap admits at most max lines in each second of the clock (wall-clock
// seconds: a burst at most max lines, a flood at most max lines/s).
type rateCap struct {
	max    uint64
	second int64 // the window: Unix second of the lines counted in used
	used   uint64
}

// allow reports whether one more line fits in now's second.
func (c *rateCap) allow(now time.Time) bool {
	if s := now.Unix(); s != c.second {
		c.second, c.used = s, 0
	}
	if c.used >= c.max {
		return false
	}
	c.used++
	return true
}
