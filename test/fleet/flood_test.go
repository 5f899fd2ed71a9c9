// SPDX-License-Identifier: Apache-2.0

package fleet

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/internal/testkit/fleetlab"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/pktgen"
)

// testFlood sends a paced flood over a range of spoofed sources and source
// ports to one host, and checks that it reaches that host's XDP program,
// counters and sockets whole, and no other host.
func testFlood(t *testing.T, l *fleetlab.Lab) {
	const target = 1
	h := l.Host(target)
	sinks := attachSinks(t, l)
	sink := sinks[target]
	conn := floodSocket(t, h)
	defer conn.Close()
	got := readAll(conn)

	snmp := h.NS.Snapshot(t)
	before := make([]uint64, l.Hosts())
	for i := range before {
		before[i] = rxPackets(t, l, i)
	}
	sendPacedFlood(t, l, target)

	seen := <-got
	for i := range before {
		d := rxPackets(t, l, i) - before[i]
		switch {
		case i == target && (d < pacedCount || d > pacedCount+10):
			t.Errorf("host %d: eth0 rx grew by %d, want %d", i, d, pacedCount)
		case i != target && d > 10:
			t.Errorf("host %d: eth0 rx grew by %d though the flood went to host %d", i, d, target)
		}
	}
	// The hosts' own background packets (neighbour discovery) pass
	// through XDP and the counters too: allow a few.
	if n, err := sink.Received(); err != nil || n < pacedCount || n > pacedCount+10 {
		t.Errorf("XDP on host %d saw %d frames (%v), want %d", target, n, err, pacedCount)
	}
	checkSocketGotFlood(t, target, h.NS.Snapshot(t).Delta(snmp), seen)
	checkSourcesShared(t, sink)
}

// The paced flood: frames, sources (one a frame, wrapping) and frames a
// second.
const pacedCount, pacedSources, pacedRate = 2000, 64, 10000

// floodSocket is a socket on the host, which receives what its stack
// delivers: spoofed sources and every source port must get through.
func floodSocket(t *testing.T, h *fleetlab.Host) *net.UDPConn {
	var conn *net.UDPConn
	if err := h.NS.Do(func() (err error) {
		conn, err = net.ListenUDP("udp4", &net.UDPAddr{Port: 9999})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// A buffer for the whole flood, past rmem_max (root may force it):
	// the reader shares two CPUs with everything else.
	raw, err := conn.SyscallConn()
	if err != nil {
		conn.Close()
		t.Fatal(err)
	}
	if cerr := raw.Control(func(fd uintptr) {
		err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)
	}); cerr != nil || err != nil {
		conn.Close()
		t.Fatalf("SO_RCVBUFFORCE: %v %v", cerr, err)
	}
	return conn
}

// readAll reads conn until it is quiet for a second, and sends the
// datagrams it read by sender.
func readAll(conn *net.UDPConn) <-chan map[netip.AddrPort]int {
	got := make(chan map[netip.AddrPort]int, 1)
	go func() {
		seen := map[netip.AddrPort]int{}
		buf := make([]byte, 2048)
		for {
			_ = conn.SetReadDeadline(time.Now().Add(time.Second))
			_, from, err := conn.ReadFrom(buf)
			if err != nil {
				got <- seen
				return
			}
			seen[from.(*net.UDPAddr).AddrPort()]++
		}
	}()
	return got
}

// sendPacedFlood floods the target and checks that every frame left, no
// faster than the rate.
func sendPacedFlood(t *testing.T, l *fleetlab.Lab, target int) {
	const count, sources, rate = pacedCount, pacedSources, pacedRate
	src := netip.MustParseAddr("198.51.100.1")
	res, err := l.Flood(context.Background(), target, fleetlab.Flood{
		Count: count, Src: src, Sources: sources, SrcPorts: [2]uint16{5000, 5009},
		DstPort: 9999, Payload: 64, Rate: rate, Timeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("flood: %d frames in %v", res.Sent, res.Elapsed)
	if res.Sent != count {
		t.Fatalf("sent %d, want %d", res.Sent, count)
	}
	// The last chunk leaves when the schedule reaches it, one chunk
	// (rate × 10 ms) before the end.
	if minimum := time.Duration((count - rate/100) * float64(time.Second) / rate); res.Elapsed < minimum {
		t.Fatalf("%d frames in %v: faster than %d/s", count, res.Elapsed, rate)
	}
}

// checkSocketGotFlood: the target's UDP took every datagram, and the
// socket read them from every source and source port.
func checkSocketGotFlood(t *testing.T, target int, udp testutil.Counters, seen map[netip.AddrPort]int) {
	const count, sources = pacedCount, pacedSources
	if udp.UDPInDatagrams+udp.UDPRcvbufErrors < count {
		t.Errorf("host %d's UDP took %d datagrams (%d read, %d dropped for buffer), want %d",
			target, udp.UDPInDatagrams+udp.UDPRcvbufErrors, udp.UDPInDatagrams, udp.UDPRcvbufErrors, count)
	}
	addrs, ports, total := map[netip.Addr]bool{}, map[uint16]bool{}, 0
	for ap, n := range seen {
		addrs[ap.Addr()], ports[ap.Port()] = true, true
		total += n
	}
	if total != int(udp.UDPInDatagrams) || len(addrs) != sources || len(ports) != 10 {
		t.Errorf("socket read %d datagrams (SNMP: %d) from %d sources and %d ports, want %d sources and 10 ports",
			total, udp.UDPInDatagrams, len(addrs), len(ports), sources)
	}
}

// checkSourcesShared: sequential sources, one per frame and wrapping,
// across chunks that do not divide their number: each gets its share to
// one frame.
func checkSourcesShared(t *testing.T, sink *pktgen.Sink) {
	const count, sources = pacedCount, pacedSources
	perSource, err := sink.Sources()
	if err != nil {
		t.Fatal(err)
	}
	for a, n := range perSource {
		if !netip.MustParsePrefix("198.51.100.0/24").Contains(a) {
			continue // the host's own background packets
		}
		b := a.As4()
		if off := int(b[3]) - 1; off < 0 || off >= sources || n < count/sources || n > count/sources+1 {
			t.Errorf("source %v sent %d frames, want one of %d sources with %d or %d", a, n, sources, count/sources, count/sources+1)
		}
	}
}

func rxPackets(t *testing.T, l *fleetlab.Lab, i int) uint64 {
	t.Helper()
	st, err := l.Eth0Stats(i)
	if err != nil {
		t.Fatal(err)
	}
	return st.RxPackets
}

// attachSinks puts a counting XDP program on every host's Eth0: live
// frames need one there, as the limiter will be in the fleet tests.
func attachSinks(t *testing.T, l *fleetlab.Lab) []*pktgen.Sink {
	t.Helper()
	sinks := make([]*pktgen.Sink, l.Hosts())
	for i := range sinks {
		h := l.Host(i)
		s, err := pktgen.AttachSink(h.NS.Path(), h.Eth0, pktgen.SinkCount)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		sinks[i] = s
	}
	return sinks
}

// testConcurrentFloods floods every host at once, as the fleet accuracy
// tests do: the lab's one generator interleaves the floods' chunks, and
// each host gets exactly its own.
func testConcurrentFloods(t *testing.T, l *fleetlab.Lab) {
	sinks := attachSinks(t, l)
	const count, rate = 3000, 20000
	var wg sync.WaitGroup
	errs := make([]error, l.Hosts())
	sent := make([]uint64, l.Hosts())
	start := time.Now()
	for i := range l.Hosts() {
		wg.Go(func() {
			res, err := l.Flood(context.Background(), i, fleetlab.Flood{
				Count: count, Src: netip.AddrFrom4([4]byte{203, 0, 113, byte(i + 1)}),
				Rate: rate, Timeout: 10 * time.Second,
			})
			sent[i], errs[i] = res.Sent, err
		})
	}
	wg.Wait()
	t.Logf("%d floods of %d frames at %d/s each took %v", l.Hosts(), count, rate, time.Since(start).Round(time.Millisecond))
	for i := range l.Hosts() {
		if errs[i] != nil || sent[i] != count {
			t.Fatalf("flood to host %d: sent %d, %v", i, sent[i], errs[i])
		}
		srcs, err := sinks[i].Sources()
		if err != nil {
			t.Fatal(err)
		}
		want := netip.AddrFrom4([4]byte{203, 0, 113, byte(i + 1)})
		if srcs[want] != count {
			t.Errorf("host %d saw %d frames from %v, want %d (all sources: %v)", i, srcs[want], want, count, srcs)
		}
	}
}
