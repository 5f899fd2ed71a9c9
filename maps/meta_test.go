// SPDX-License-Identifier: Apache-2.0

package maps

import (
	"strings"
	"testing"
	"time"
)

// TestMetaConversion: the metadata survives the map's layout unchanged,
// an unrecorded attach time stays zero, and a path longer than the map
// holds keeps its first 255 bytes.
func TestMetaConversion(t *testing.T) {
	full := Meta{
		LayoutVersion: LayoutVersion, NextStateID: 7, AttachMode: AttachGeneric, Clock: ClockCoarse,
		Attached: time.Unix(0, 1763900000123456789), Tick: 4 * time.Millisecond,
		NetnsIno: 4026531840, Ifindex: 3, Pid: 4242,
		PolicySHA256: [32]byte{1, 2, 3, 31: 0xff}, PolicyPath: "/etc/xdplimit/policy.yaml",
		BanLimits: BanLimits{MinPrefix4: 0, MinPrefix6: 128, MaxImported: 1 << 22, MaxPerSync: 100000, Set: true},
	}
	long := Meta{PolicyPath: strings.Repeat("p", 300)}
	for _, c := range []struct {
		name     string
		in, want Meta
	}{
		{"full", full, full},
		{"empty", Meta{}, Meta{}},
		{"long path", long, Meta{PolicyPath: strings.Repeat("p", 255)}},
	} {
		got := metaFrom(c.in.raw())
		if !got.Attached.Equal(c.want.Attached) || got.Attached.IsZero() != c.want.Attached.IsZero() {
			t.Errorf("%s: attached %v, want %v", c.name, got.Attached, c.want.Attached)
		}
		got.Attached, c.want.Attached = time.Time{}, time.Time{}
		if got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
