// SPDX-License-Identifier: Apache-2.0

package maps

import (
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/gen"
)

// The samples of every packet, whatever its verdict (bpf/traffic.h): the
// frame's first bytes as they arrived, for captures and fingerprints. The
// datapath takes one in TrafficOneIn packets while the policy asks for it
// (Image.TrafficOneIn), into a ring per CPU read as the drop samples are
// (dropring.go: an mmap, seqlocks, a cursor per reader).

// TrafficRingSize is the number of samples each CPU's ring holds.
const TrafficRingSize = uint32(gen.XdplimitXdplConstXDPL_TRAFFIC_RING)

// TrafficCap is the most of a frame a sample keeps.
const TrafficCap = int(gen.XdplimitXdplConstXDPL_TRAFFIC_CAP)

// TrafficSample is one sampled packet.
type TrafficSample struct {
	// At is the datapath's coarse clock (CLOCK_MONOTONIC) when it was
	// sampled.
	At time.Duration
	// Len is the frame's length; Frame its first bytes, at most TrafficCap.
	Len   int
	Frame []byte
	// Verdict is what the limiter did, Why which stage decided, Slot the
	// rule's counter slot when Why is WhyRule.
	Verdict Verdict
	Why     Why
	Slot    uint32
}

const (
	trafficSampleWords = int(unsafe.Sizeof(gen.XdplimitXdplTrafficSample{}) / 8)
	trafficSeqWord     = unsafe.Offsetof(gen.XdplimitXdplTrafficSample{}.Seq) / 8
)

// TrafficRing reads the rings of sampled packets as DropRing reads the
// drops': cursor is what the previous call returned (nil the first time),
// samples those written since (at most a ring's size less one per CPU),
// written how many the CPUs wrote in the interval.
func (l *Limiter) TrafficRing(cursor []uint64) (samples []TrafficSample, written uint64, next []uint64, err error) {
	var heads []gen.XdplimitXdplDropRing
	if err := l.objs.XdplTraffic.Lookup(uint32(0), &heads); err != nil {
		return nil, 0, nil, err
	}
	size := uint64(TrafficRingSize)
	var rec gen.XdplimitXdplTrafficSample
	dst := unsafe.Slice((*uint64)(unsafe.Pointer(&rec)), trafficSampleWords)
	err = l.readView(&l.traffic, l.objs.XdplTrafficSamples, uint32(8*trafficSampleWords), "traffic samples", func(mem []byte) {
		written, next = readRings(heads, cursor, size, func(cpu int, start, head uint64) uint64 {
			return readRingWords(mem, trafficSeqWord, uint64(cpu)*size, size, start, head, dst, func() {
				samples = append(samples, trafficSample(&rec))
			})
		})
	})
	if err != nil {
		return nil, 0, nil, err
	}
	return samples, written, next, nil
}

func trafficSample(s *gen.XdplimitXdplTrafficSample) TrafficSample {
	n := min(int(s.Caplen), len(s.Frame))
	return TrafficSample{At: time.Duration(s.Ns), Len: int(s.Len), Frame: append([]byte(nil), s.Frame[:n]...),
		Verdict: Verdict(s.Verdict), Why: Why(s.Why), Slot: uint32(s.Slot)}
}

// TrafficSampling is the sampling of every packet in force: one in this
// many, or 0 when the policy in force asks for none.
func (l *Limiter) TrafficSampling() (uint32, error) {
	g, ctl, err := l.active()
	if err != nil {
		return 0, err
	}
	c := ctl.Gen[g]
	if c.Flags&gfTraffic == 0 {
		return 0, nil
	}
	return c.TrafficMask + 1, nil
}

// MonotonicToWall turns the datapath's clock (CLOCK_MONOTONIC, in ns) into
// wall time, both read now: samples' At becomes a time to print or bin.
func MonotonicToWall() func(time.Duration) time.Time {
	var ts unix.Timespec
	now := time.Now()
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return func(time.Duration) time.Time { return now }
	}
	mono := time.Duration(ts.Nano())
	return func(at time.Duration) time.Time { return now.Add(at - mono) }
}
