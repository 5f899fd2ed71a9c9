// SPDX-License-Identifier: Apache-2.0

package pktgen

import (
	"context"
	"math"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
)

// cpuList returns up to n CPU ids this process may run on.
func cpuList(n int) []int {
	var cpus []int
	for i := 0; i < runtime.NumCPU() && len(cpus) < n; i++ {
		cpus = append(cpus, i)
	}
	return cpus
}

// TestSendLive floods 200k UDP frames from 1000 sequential sources over a
// veth pair between two namespaces and checks, independently of the
// generator's own counters, that the receiving stack got them with valid
// checksums and that the sources are the expected ones.
func TestSendLive(t *testing.T) {
	testutil.RequireLiveFrames(t)
	cpus := cpuList(2)
	v := testutil.NewVethPair(t, testutil.VethConfig{Queues: len(cpus)})

	sink, err := AttachSink(v.PeerNS.Path(), v.PeerName, SinkCount)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()

	for _, tc := range []struct {
		name  string
		frame []byte
		first netip.Addr
	}{
		{"IPv4", UDP4(v.Addr, v.PeerAddr, 40000, 9, 18), netip.MustParseAddr("198.19.0.0")},
		{"IPv6", UDP6(v.Addr6, v.PeerAddr6, 40000, 9, 18), netip.MustParseAddr("2001:2::1:0")},
	} {
		t.Run(tc.name, func(t *testing.T) { checkSendLive(t, v, sink, cpus, tc.frame, tc.first) })
	}
}

// checkSendLive sends 200k copies of template from 1000 sequential sources
// starting at first, and checks what the receiving stack and its XDP sink saw.
func checkSendLive(t *testing.T, v *testutil.Veth, sink *Sink, cpus []int, template []byte, first netip.Addr) {
	const (
		count   = 200_000
		sources = 1000
	)
	g, err := Open(Config{
		Sources: Sources{Mode: Sequential, First: first, Count: sources},
		Timeout: 30 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()

	seenBefore, err := sink.Sources()
	if err != nil {
		t.Fatal(err)
	}
	before := v.PeerNS.Snapshot(t)
	dropped0 := v.PeerNS.RxDropped(t, v.PeerName)
	rx := v.PeerNS.RxSeen(t, v.PeerName)
	frame := SetMACs(template, v.MAC, v.PeerMAC)
	res, err := g.Send(context.Background(), v.NS.Path(), v.Name, frame, count, cpus...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sent %v on CPUs %v (per CPU %v)", res, cpus, res.PerCPU)
	if !v.PeerNS.WaitRx(t, v.PeerName, rx, res.Sent) {
		t.Logf("the receiver had not taken in or dropped every frame sent after 10 s")
	}
	d := v.PeerNS.Settle(t).Delta(before)
	lost := v.PeerNS.RxDropped(t, v.PeerName) - dropped0

	if res.Sent < count || res.Sent > count+count/10 {
		t.Errorf("generator sent %d, want %d", res.Sent, count)
	}
	if res.Bad != 0 {
		t.Errorf("%d frames refused as malformed", res.Bad)
	}
	received, noPorts, csumErr := d.IPInReceives, d.UDPNoPorts, d.UDPInCsumErrors
	if first.Is6() {
		received, noPorts, csumErr = d.IP6InReceives, d.UDP6NoPorts, d.UDP6InCsumErrors
	}
	t.Logf("receiver stack: %d IP receives, %d UDP no-port, %d checksum errors; veth dropped %d before the receiver", received, noPorts, csumErr, lost)
	// Every frame sent reached the receiver's UDP layer or was
	// dropped by veth when the receiver's ring was full, which it
	// counts in rx_dropped: under emulation, or when the receiver's
	// NAPI is deferred to ksoftirqd, that is up to two thirds of a
	// flood (the sender's stack's own frames, IPv6 MLD, lost the same
	// way loosen this by as many). A frame that arrived and was not
	// taken by UDP as valid is the generator's fault.
	if received+lost < res.Sent {
		t.Errorf("receiver stack saw %d of %d frames, and veth dropped %d", received, res.Sent, lost)
	}
	if noPorts+lost < res.Sent {
		t.Errorf("UDP accepted %d of %d datagrams (checksum errors %d), and veth dropped %d", noPorts, res.Sent, csumErr, lost)
	}
	if csumErr != 0 {
		t.Errorf("%d UDP checksum errors", csumErr)
	}

	seen, err := sink.Sources()
	if err != nil {
		t.Fatal(err)
	}
	distinct, frames := sinkSources(t, seenBefore, seen, first, sources)
	t.Logf("XDP sink: %d distinct sources, %d frames", distinct, frames)
	if noPorts < frames {
		t.Errorf("the receiver's XDP program passed %d frames of the flood, its UDP layer accepted %d", frames, noPorts)
	}
	if distinct < sources*95/100 {
		t.Errorf("%d distinct sources arrived, want about %d", distinct, sources)
	}
}

// sinkSources counts the distinct sources the sink saw since seenBefore,
// and their frames; a source outside the sources from first is an error.
func sinkSources(t *testing.T, seenBefore, seen map[netip.Addr]uint64, first netip.Addr, sources int64) (distinct int, frames uint64) {
	for a, n := range seen {
		if seenBefore[a] == n {
			continue // not from this subtest
		}
		n -= seenBefore[a]
		if a.Is4() != first.Is4() || a.IsUnspecified() {
			continue // background: MLD reports from ::
		}
		off := int64(low32(a)) - int64(low32(first))
		if off < 0 || off >= sources {
			t.Errorf("unexpected source %v (%d frames)", a, n)
			continue
		}
		distinct++
		frames += n
	}
	return distinct, frames
}

// TestSendBounded checks that Send honours context cancellation and its
// own timeout while the requested count is far from reached.
func TestSendBounded(t *testing.T) {
	testutil.RequireLiveFrames(t)
	v := testutil.NewVethPair(t, testutil.VethConfig{})
	sink, err := AttachSink(v.PeerNS.Path(), v.PeerName, SinkDrop)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	frame := SetMACs(UDP4(v.Addr, v.PeerAddr, 1, 9, 18), v.MAC, v.PeerMAC)

	g, err := Open(Config{Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()

	start := time.Now()
	res, err := g.Send(context.Background(), v.NS.Path(), v.Name, frame, 1<<40)
	if el := time.Since(start); err == nil || el > 2*time.Second {
		t.Fatalf("timeout: err %v after %v", err, el)
	}
	t.Logf("timeout after %v: %v (%v)", time.Since(start), res, err)
	if res.Sent == 0 {
		t.Error("nothing sent before the timeout")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	g2, err := Open(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer g2.Close()
	start = time.Now()
	_, err = g2.Send(ctx, v.NS.Path(), v.Name, frame, 1<<40, cpuList(2)...)
	if el := time.Since(start); err == nil || el > 2*time.Second {
		t.Fatalf("cancel: err %v after %v", err, el)
	}

	// A peer that does not exist in the namespace is an error, not a hang.
	if _, err := g2.Send(context.Background(), v.NS.Path(), "nosuchdev", frame, 10); err == nil {
		t.Error("send to a missing interface succeeded")
	}
}

// TestSendPaced checks that a paced Send never runs ahead of its rate: the
// last call starts only when the frames before it were due, so the whole
// send lasts at least that long, on one worker and on two, and the rate
// limits nothing else (every frame is sent). A bad rate is refused.
func TestSendPaced(t *testing.T) {
	testutil.RequireLiveFrames(t)
	v := testutil.NewVethPair(t, testutil.VethConfig{Queues: 2})
	sink, err := AttachSink(v.PeerNS.Path(), v.PeerName, SinkDrop)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	frame := SetMACs(UDP4(v.Addr, v.PeerAddr, 1, 9, 18), v.MAC, v.PeerMAC)
	g, err := Open(Config{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for _, bad := range []float64{-1, math.NaN(), math.Inf(1)} {
		if err := g.SetRate(bad); err == nil {
			t.Errorf("SetRate(%v) accepted", bad)
		}
	}
	const (
		rate  = 200_000.0
		count = 100_000
	)
	if err := g.SetRate(rate); err != nil {
		t.Fatal(err)
	}
	for _, cpus := range [][]int{nil, cpuList(2)} {
		res, err := g.Send(context.Background(), v.NS.Path(), v.Name, frame, count, cpus...)
		if err != nil {
			t.Fatal(err)
		}
		workers := max(len(cpus), 1)
		// Each worker sends count/workers at rate/workers, in calls of a
		// millisecond's frames: its last call starts no earlier than
		// (its share - one call) / its rate after it began.
		share, perWorker := float64(count/workers), rate/float64(workers)
		floor := time.Duration((share - perWorker/1000) / perWorker * float64(time.Second))
		t.Logf("paced at %.0f/s on %d worker(s): %v, at least %v", rate, workers, res, floor)
		if res.Sent < count {
			t.Errorf("sent %d of %d", res.Sent, count)
		}
		if res.Elapsed < floor {
			t.Errorf("%d frames at %.0f/s took %v, less than the pace allows (%v)", count, rate, res.Elapsed, floor)
		}
	}
	if err := g.SetRate(0); err != nil {
		t.Fatal(err)
	}
}
