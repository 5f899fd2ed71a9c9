// SPDX-License-Identifier: Apache-2.0

package maps_test

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

const trafficPolicy = `
allow: [192.0.2.99/32]
rules:
  - {name: udp, match: {protocol: udp, dst_ports: [9000]}, limit: {algorithm: token_bucket, rate: 1/m, burst: 1}}
`

// Every verdict is sampled, one in TrafficOneIn: the frame as it arrived
// (cut at maps.TrafficCap), its length, the verdict and what decided it.
// Off, nothing is.
func TestTrafficSamples(t *testing.T) {
	img := xdpltest.Compile(t, trafficPolicy)
	img.TrafficOneIn = 1
	l := xdpltest.LoadImage(t, maps.Options{Clock: maps.ClockMap, MaxSources: 1 << 12}, img)
	_, _, cursor, err := l.TrafficRing(nil)
	if err != nil {
		t.Fatal(err)
	}
	src, dst := netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("10.0.0.1")
	udp := pktgen.Frame{Src: src, Dst: dst, SrcPort: 4000, DstPort: 9000, Payload: 20}.MustBuild()
	big := pktgen.Frame{Src: src, Dst: dst, SrcPort: 4000, DstPort: 53, Payload: 1000}.MustBuild()
	allowed := pktgen.Frame{Src: netip.MustParseAddr("192.0.2.99"), Dst: dst, SrcPort: 4000, DstPort: 9000}.MustBuild()
	frames := []struct {
		frame   []byte
		verdict maps.Verdict
		why     maps.Why
	}{
		{udp, maps.VerdictPass, maps.WhyRule},      // the burst
		{udp, maps.VerdictDrop, maps.WhyRule},      // over the limit
		{big, maps.VerdictPass, maps.WhyUnmatched}, // no rule, cut at the cap
		{allowed, maps.VerdictPass, maps.WhyAllow},
	}
	for _, f := range frames {
		xdpltest.Run(t, l, f.frame, 10*time.Second)
	}
	got, written, next, err := l.TrafficRing(cursor)
	if err != nil {
		t.Fatal(err)
	}
	if written != uint64(len(frames)) || len(got) != len(frames) {
		t.Fatalf("%d samples (%d written), want %d", len(got), written, len(frames))
	}
	for i, f := range frames {
		s := got[i]
		want := f.frame[:min(len(f.frame), maps.TrafficCap)]
		if s.Len != len(f.frame) || !bytes.Equal(s.Frame, want) {
			t.Errorf("sample %d: %d bytes of a %d-byte frame, want %d of %d (equal: %v)",
				i, len(s.Frame), s.Len, len(want), len(f.frame), bytes.Equal(s.Frame, want))
		}
		if s.Verdict != f.verdict || s.Why != f.why {
			t.Errorf("sample %d: verdict %v by %v, want %v by %v", i, s.Verdict, s.Why, f.verdict, f.why)
		}
	}
	if got[0].Why == maps.WhyRule && got[0].Slot != got[1].Slot {
		t.Errorf("the rule's two samples name slots %d and %d", got[0].Slot, got[1].Slot)
	}

	// One in 4: about a quarter (4000 packets: 1000 ± 7 standard deviations).
	img.TrafficOneIn = 4
	if err := l.Apply(img); err != nil {
		t.Fatal(err)
	}
	for range 4000 {
		xdpltest.Run(t, l, big, 20*time.Second)
	}
	_, written, next, err = l.TrafficRing(next)
	if err != nil {
		t.Fatal(err)
	}
	if written < 800 || written > 1200 {
		t.Errorf("one in 4 of 4000 packets: %d sampled", written)
	}

	img.TrafficOneIn = 0
	if err := l.Apply(img); err != nil {
		t.Fatal(err)
	}
	for range 100 {
		xdpltest.Run(t, l, big, 30*time.Second)
	}
	if _, written, _, err = l.TrafficRing(next); err != nil || written != 0 {
		t.Errorf("sampling off: %d sampled (%v)", written, err)
	}
}
