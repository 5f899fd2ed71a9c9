// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"fmt"
	"math/bits"
)

// Capture is the capture: section: the datapath samples packets of every
// verdict, one in OneIn, for `xdplimit capture` (and the fingerprints a
// capture gives `policy suggest`). The zero Capture is off.
type Capture struct {
	// OneIn is a power of two, 1 to MaxCaptureOneIn: the largest not above
	// the N the policy wrote (the datapath tests the bits of a random
	// number).
	OneIn uint32
	// Asked is the N the policy wrote, for `policy check`.
	Asked float64
}

// Bounds and default of the capture: section.
const (
	DefaultCaptureOneIn = 1024
	MaxCaptureOneIn     = 1 << 16
)

// capture decodes the top-level capture section:
//
//	capture: {sample: 1/1024 | 1024 | 0.1%}
func (d *decoder) capture(f field) Capture {
	c := Capture{OneIn: DefaultCaptureOneIn, Asked: DefaultCaptureOneIn}
	m := d.mapping(f.value, "capture", "sample")
	if m == nil {
		return c
	}
	sf, ok := m["sample"]
	if !ok {
		return c
	}
	s, ok := d.scalar(sf.value, "capture.sample", "a share like 1/1024 or 0.1%")
	if !ok {
		return c
	}
	n, err := parseOneIn(s)
	if err != nil || n > MaxCaptureOneIn {
		d.errorf(sf.value, "capture.sample", "sample %q: write one in N packets as 1/N or N (N from 1 to %d), or a share like 0.1%%", s, MaxCaptureOneIn)
		return c
	}
	c.Asked = n
	c.OneIn = sampleOneIn(n)
	return c
}

// sampleOneIn is the one in N a sampling section asks for, as the datapath
// takes it: the largest power of two not above N (it tests the bits of a
// random number).
func sampleOneIn(n float64) uint32 { return 1 << (bits.Len32(uint32(n)) - 1) }

// String renders the section as `policy check` prints it.
func (c Capture) String() string {
	s := fmt.Sprintf("one in %d packets of every verdict", c.OneIn)
	if c.Asked != float64(c.OneIn) {
		s += fmt.Sprintf(" (asked: one in %g; the datapath samples one in a power of two)", c.Asked)
	}
	return s
}
