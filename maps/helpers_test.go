// SPDX-License-Identifier: Apache-2.0

package maps_test

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/internal/cpupin"
	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

// The helpers the maps tests share. What other packages' tests need too
// (compiling a policy, loading the program, running it on a frame) is in
// internal/testkit/xdpltest; frames are pktgen.Frame.

const (
	xdpDrop = 1
	xdpPass = 2
)

const t0 = 10 * time.Second // injected time starts here

// load loads the program with clock and the policy (loadWith).
func load(t testing.TB, clock maps.Clock, yaml string) *maps.Limiter {
	t.Helper()
	return loadWith(t, maps.Options{Clock: clock}, yaml)
}

// loadWith is xdpltest.Load with source tables of 64k entries unless
// opts says otherwise: a sixteenth of the program's default, plenty for
// these tests and quicker to create.
func loadWith(t testing.TB, opts maps.Options, yaml string) *maps.Limiter {
	t.Helper()
	if opts.MaxSources == 0 {
		opts.MaxSources = 1 << 16
	}
	return xdpltest.Load(t, opts, yaml)
}

// with returns f changed by change.
func with(f pktgen.Frame, change func(*pktgen.Frame)) pktgen.Frame {
	change(&f)
	return f
}

// nonFirst makes f a non-first fragment at offset units × 8 bytes: it then
// carries, after the IP headers, 8 bytes where its transport header would
// be and its payload.
func nonFirst(f pktgen.Frame, units uint16) pktgen.Frame {
	f.Frag = &pktgen.Fragment{Offset: 8 * units}
	f.Payload += 8
	return f
}

// udp4 is a UDP datagram from src (IPv4) to 10.0.0.1, port 4000 to 53, no
// payload (padded to Ethernet's 60 bytes).
func udp4(src string) pktgen.Frame {
	return pktgen.Frame{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr("10.0.0.1"), SrcPort: 4000, DstPort: 53}
}

// udp6 is udp4 from an IPv6 source to 2001:db8::1.
func udp6(src string) pktgen.Frame {
	return pktgen.Frame{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr("2001:db8::1"), SrcPort: 4000, DstPort: 53}
}

// tcp4 is a TCP SYN from src (IPv4) to 10.0.0.1, port 4000 to 80.
func tcp4(src string) pktgen.Frame {
	return pktgen.Frame{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr("10.0.0.1"), Proto: pktgen.ProtoTCP,
		SrcPort: 4000, DstPort: 80, TCPFlags: pktgen.TCPSyn}
}

// repeatRun runs pkt n times at t0 and returns the verdicts.
func repeatRun(t *testing.T, l *maps.Limiter, pkt []byte, n int) []uint32 {
	var v []uint32
	for i := 0; i < n; i++ {
		v = append(v, xdpltest.Run(t, l, pkt, t0))
	}
	return v
}

// verdicts reads a sequence of P (pass) and D (drop).
func verdicts(s string) []uint32 {
	var v []uint32
	for _, c := range s {
		switch c {
		case 'P':
			v = append(v, xdpPass)
		case 'D':
			v = append(v, xdpDrop)
		}
	}
	return v
}

// letters writes verdicts as verdicts reads them.
func letters(v []uint32) string {
	var b strings.Builder
	for _, x := range v {
		switch x {
		case xdpPass:
			b.WriteByte('P')
		case xdpDrop:
			b.WriteByte('D')
		default:
			fmt.Fprintf(&b, "<%d>", x)
		}
	}
	return b.String()
}

// counter reads one of the program's counters.
func counter(t *testing.T, l *maps.Limiter, c maps.Counter) uint64 {
	t.Helper()
	cs, err := l.Counters()
	if err != nil {
		t.Fatal(err)
	}
	return cs[c].Packets
}

// onBothCPUs runs f on CPU 0 and on CPU 1 at once, each on a thread pinned
// to its CPU, both started together once both are pinned.
func onBothCPUs(f func(cpu int) error) error {
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make([]error, 2)
	for cpu := 0; cpu < 2; cpu++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			unpin, err := cpupin.Pin(cpu)
			if errs[cpu] = err; err != nil {
				return
			}
			defer unpin()
			<-start
			errs[cpu] = f(cpu)
		}()
	}
	close(start)
	wg.Wait()
	return errors.Join(errs...)
}

// mono reads CLOCK_MONOTONIC, the clock the datapath reads.
func mono() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}
