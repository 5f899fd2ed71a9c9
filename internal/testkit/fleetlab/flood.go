// SPDX-License-Identifier: Apache-2.0

package fleetlab

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/xdplimit/xdplimit/pktgen"
)

// Flood describes UDP traffic from the generator to one host's Eth0.
type Flood struct {
	// Count is the number of frames (required: every flood is bounded).
	Count uint64
	// Src is the first source address (IPv4; default the generator end's
	// address). Sources > 1 walks that many consecutive addresses, one per
	// frame, wrapping. Sources need no route back: rp_filter is off.
	Src     netip.Addr
	Sources uint32
	// SrcPorts is the first and last source port (default 40000, 40000).
	// The port changes per chunk of frames, not per frame (the generator
	// varies addresses only): every port gets a share when Count allows.
	SrcPorts [2]uint16
	// DstPort defaults to 9 (discard); Payload is the UDP payload size.
	DstPort uint16
	Payload int
	// Rate caps the frames per second (0: as fast as the generator goes).
	// Frames leave in chunks of Rate × 10 ms, each chunk when the schedule
	// reaches it, so the rate holds over any 10 ms and never runs ahead.
	Rate float64
	// Timeout is a hard limit on the whole flood (default 30 s).
	Timeout time.Duration
}

// FloodResult is what the generator sent.
type FloodResult struct {
	Sent    uint64
	Elapsed time.Duration
	// Gaps are the lapses of a paced flood: each time between one chunk's
	// end and the next one's start longer than LapseAfter, when the
	// sender was held back (a loaded machine) and a limiter saw nothing.
	Gaps []time.Duration
}

// LapseAfter is the shortest gap between chunks reported in Gaps: ten
// chunk periods.
const LapseAfter = 10 * chunkPeriod

// chunkPeriod is the pacing granularity of a rate-limited flood.
const chunkPeriod = 10 * time.Millisecond

// Flood sends f to host i's Eth0. An XDP program must be attached to Eth0
// (the limiter, or a pktgen.Sink): live frames to a veth without one vanish
// while counting as sent. Floods to several hosts may run concurrently; the
// generator interleaves their chunks. Run tests that flood under
// `flock /tmp/xdplimit-flood.lock`.
func (l *Lab) Flood(ctx context.Context, i int, f Flood) (FloodResult, error) {
	h := l.hosts[i]
	if f.Count == 0 {
		return FloodResult{}, errors.New("fleetlab: flood without a count")
	}
	if !f.Src.IsValid() {
		f.Src = h.GenLink.Addr
	}
	if !f.Src.Is4() {
		return FloodResult{}, fmt.Errorf("fleetlab: source %v is not IPv4", f.Src)
	}
	f.Sources = max(f.Sources, 1)
	if f.SrcPorts == [2]uint16{} {
		f.SrcPorts = [2]uint16{40000, 40000}
	}
	if f.SrcPorts[1] < f.SrcPorts[0] {
		return FloodResult{}, fmt.Errorf("fleetlab: port range %v", f.SrcPorts)
	}
	if f.DstPort == 0 {
		f.DstPort = 9
	}
	if f.Timeout <= 0 {
		f.Timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, f.Timeout)
	defer cancel()

	ports := uint64(f.SrcPorts[1]-f.SrcPorts[0]) + 1
	chunk := f.Count
	if f.Rate > 0 {
		chunk = max(1, uint64(f.Rate*chunkPeriod.Seconds()))
	}
	chunk = min(chunk, (f.Count+ports-1)/ports)
	first := binary.BigEndian.Uint32(f.Src.AsSlice())

	start := time.Now()
	var res FloodResult
	var lastEnd time.Time
	for k := uint64(0); res.Sent < f.Count; k++ {
		if f.Rate > 0 {
			due := start.Add(time.Duration(float64(res.Sent) / f.Rate * float64(time.Second)))
			select {
			case <-ctx.Done():
				return res, fmt.Errorf("fleetlab: flood to host %d: %w", i, context.Cause(ctx))
			case <-time.After(time.Until(due)):
			}
		}
		// The generator restarts its cursor at every Send and wraps to
		// First: a chunk that starts mid-range must stop at its end.
		off := uint32(res.Sent % uint64(f.Sources))
		n := min(chunk, f.Count-res.Sent)
		if off != 0 {
			n = min(n, uint64(f.Sources-off))
		}
		frame := pktgen.Frame{
			SrcMAC: h.GenLink.MAC, DstMAC: h.Eth0MAC, Src: f.Src, Dst: h.Eth0Addr,
			SrcPort: f.SrcPorts[0] + uint16(k%ports), DstPort: f.DstPort, Payload: f.Payload,
		}
		b, err := frame.Build()
		if err != nil {
			return res, err
		}
		if now := time.Now(); !lastEnd.IsZero() && now.Sub(lastEnd) > LapseAfter {
			res.Gaps = append(res.Gaps, now.Sub(lastEnd))
		}
		r, err := l.send(ctx, h, b, n, pktgen.Sources{
			Mode:  pktgen.Sequential,
			First: netip.AddrFrom4([4]byte(binary.BigEndian.AppendUint32(nil, first+off))),
			Count: f.Sources - off,
		})
		res.Sent += r.Sent
		lastEnd = time.Now()
		res.Elapsed = lastEnd.Sub(start)
		if err != nil {
			return res, fmt.Errorf("fleetlab: flood to host %d: %w", i, err)
		}
	}
	return res, nil
}

// send is one chunk. The generator holds one source setting at a time, so
// setting it and sending are one step under the lab's lock.
func (l *Lab) send(ctx context.Context, h *Host, frame []byte, n uint64, src pktgen.Sources) (pktgen.Result, error) {
	l.genMu.Lock()
	defer l.genMu.Unlock()
	if err := l.gen.SetSources(src); err != nil {
		return pktgen.Result{}, err
	}
	return l.gen.Send(ctx, l.Generator.Path(), h.GenLink.Name, frame, n)
}
