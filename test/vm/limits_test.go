// SPDX-License-Identifier: Apache-2.0

// Limits enforced on real traffic: per rule, over two receive queues, by
// each algorithm, per IPv6 prefix, and the allow, deny and shadow paths.

package vm

import (
	"net/netip"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/pktgen"
)

func TestAttachEnforcesAndDetaches(t *testing.T) {
	l := newLab(t, 1)
	p := l.attach(t, `
rules:
  - name: udp
    match: {protocol: udp}
    limit: {algorithm: token_bucket, rate: 2000/s, burst: 1000}
`)
	if x := l.xdpAttached(t); x == nil || x.AttachMode != 1 {
		t.Fatalf("expected a native XDP program on %s, got %+v", l.PeerName, x)
	}
	before, lost0 := l.PeerNS.Snapshot(t), l.ringDrops(t)
	res := l.flood(t, l.udpFrame(18), pktgen.Sources{}, floodCount(3_000_000))
	stack, lost := l.PeerNS.Snapshot(t).Delta(before).IPReceives(), l.ringDrops(t)-lost0
	pass, drop, _ := l.ruleCounts(t, "udp")
	t.Logf("sent %v; passed %d, dropped %d; stack received %d; veth dropped %d", res, pass, drop, stack, lost)
	checkDelivered(t, pass+drop, res.Sent, lost)
	checkStack(t, stack, pass)
	checkAdmitted(t, "admitted", float64(pass), 1000+2000*res.Elapsed.Seconds(), res, 1)

	if err := p.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("attach exited with %v:\n%s", err, p.out)
	}
	l.requireClean(t)
}

// One source spread over both receive queues (and so both CPUs) is held to
// the configured rate, not twice it.
func TestTwoQueuesOneSource(t *testing.T) {
	if runtime.NumCPU() < 2 {
		testutil.Require(t, false, "needs 2 CPUs")
	}
	l := newLab(t, 2)
	l.attach(t, `
rules:
  - name: udp
    limit: {algorithm: token_bucket, rate: 5000/s, burst: 2500}
`)
	res := l.flood(t, l.udpFrame(18), pktgen.Sources{}, floodCount(4_000_000), 0, 1)
	if len(res.PerCPU) < 2 {
		t.Fatalf("the flood did not use both CPUs: %v", res.PerCPU)
	}
	pass, drop, _ := l.ruleCounts(t, "udp")
	t.Logf("sent %v; passed %d, dropped %d", res, pass, drop)
	checkAdmitted(t, "admitted over two queues", float64(pass), 2500+5000*res.Elapsed.Seconds(), res, 2)
}

// Each algorithm's admitted count over a flood. Buckets get half a second
// of burst so that a flood preempted for a moment on a busy machine loses no
// refill; a limiter off by a factor still shows.
func TestAlgorithmsOnVeth(t *testing.T) {
	// Windows longer than the generator's gaps between calls (10-25 ms), so
	// every window the flood covers fills up. The flood starts and stops
	// between our clock readings, so each edge window may be filled or
	// untouched: the expectation is one window short of all the windows
	// the readings span, and is right to one window (2% over ~50: the
	// flood lasts 5 s, whatever the machine's rate).
	const window = int64(100 * time.Millisecond)
	for _, c := range []struct {
		name, limit string
		// admissions allowed for a flood between two CLOCK_MONOTONIC times
		want func(start, end int64) float64
	}{
		{"token_bucket", "{algorithm: token_bucket, rate: 10000/s, burst: 5000}",
			func(s, e int64) float64 { return 5000 + 10000*float64(e-s)/1e9 }},
		// A flood fills every window it touches, and the datapath's
		// windows are aligned on CLOCK_MONOTONIC: count them.
		{"fixed_window", "{algorithm: fixed_window, packets: 1000, window: 100ms}",
			func(s, e int64) float64 { return 1000 * float64(e/window-s/window) }},
		{"sliding_window", "{algorithm: sliding_window, packets: 1000, window: 100ms}",
			func(s, e int64) float64 { return 1000 * float64(e/window-s/window) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := newLab(t, 1)
			// Only the test's flow: background packets from the sender's
			// stack (IPv6 MLD, ND) must not enter the rule's counters.
			l.attach(t, "rules:\n  - name: r\n    match: {protocol: udp, src_cidrs: [198.18.0.1/32]}\n    limit: "+c.limit+"\n")
			before := l.PeerNS.Snapshot(t)
			lost0 := l.ringDrops(t)
			start := monotonic()
			res := l.floodFor(t, l.udpFrame(18), 5*time.Second, floodCount(4_000_000))
			end := monotonic()
			stack := l.PeerNS.Snapshot(t).Delta(before).IPReceives()
			lost := l.ringDrops(t) - lost0
			pass, drop, _ := l.ruleCounts(t, "r")
			t.Logf("sent %v; judged %d, passed %d; stack %d; veth dropped %d", res, pass+drop, pass, stack, lost)
			checkDelivered(t, pass+drop, res.Sent, lost)
			checkStack(t, stack, pass)
			checkAdmitted(t, "admitted", float64(pass), c.want(start, end), res, 1)
		})
	}
}

func monotonic() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// Per-/64 keys: many IPv6 sources in one /64 share one bucket.
func TestIPv6PrefixKey(t *testing.T) {
	l := newLab(t, 1)
	l.attach(t, `
rules:
  - name: v6
    key: {ipv4_prefix: 32, ipv6_prefix: 64}
    limit: {algorithm: token_bucket, rate: 1000/s, burst: 500}
`)
	f := pktgen.Frame{SrcMAC: l.MAC, DstMAC: l.PeerMAC, Src: netip.MustParseAddr("2001:2::1:0"), Dst: l.PeerAddr6,
		SrcPort: 40000, DstPort: 9, Payload: 18}
	// 4096 sources differing in their low 32 bits: all in 2001:2::/64.
	res := l.flood(t, f.MustBuild(), pktgen.Sources{Mode: pktgen.Sequential, Count: 4096}, floodCount(1_000_000))
	pass, _, _ := l.ruleCounts(t, "v6")
	checkAdmitted(t, "admitted for one /64", float64(pass), 500+1000*res.Elapsed.Seconds(), res, 1)
}

// The allowed source also matches a rule that would drop nearly all of its
// flood: it passes whole only because the allow list decides first, and
// that rule counts nothing. The denied one matches a rule that would let
// it through.
func TestAllowDenyAndShadow(t *testing.T) {
	l := newLab(t, 1)
	l.attach(t, `
rules:
  - name: shadowed
    match: {src_cidrs: [198.18.0.0/24]}
    limit: {algorithm: token_bucket, rate: 100/s, burst: 10}
    action: shadow
  - name: limited
    match: {src_cidrs: [198.18.1.0/24]}
    limit: {algorithm: token_bucket, rate: 100/s, burst: 10}
  - name: open
    match: {src_cidrs: [198.18.2.0/24]}
    limit: {algorithm: token_bucket, rate: 1000000/s, burst: 1000000}
allow: [198.18.1.0/24]
deny: [198.18.2.0/24]
`)
	for _, c := range []struct {
		src       string
		wantStack bool
	}{
		{"198.18.1.7", true},  // allowed: never limited
		{"198.18.2.7", false}, // denied: all dropped
		{"198.18.0.7", true},  // shadow: counted as would-drop, passed
	} {
		before, lost0 := l.PeerNS.Snapshot(t), l.ringDrops(t)
		f := pktgen.Frame{SrcMAC: l.MAC, DstMAC: l.PeerMAC, Src: netip.MustParseAddr(c.src), Dst: l.PeerAddr,
			SrcPort: 40000, DstPort: 9, Payload: 18}
		res := l.flood(t, f.MustBuild(), pktgen.Sources{}, 20000)
		stack, lost := l.PeerNS.Snapshot(t).Delta(before).IPReceives(), l.ringDrops(t)-lost0
		if c.wantStack {
			// Background packets (IPv6 MLD, ND) may add a few.
			t.Logf("%s: %d of %d reached the stack", c.src, stack, res.Sent)
			if stack > res.Sent+5 {
				t.Errorf("%s: %d reached the stack, more than the %d sent", c.src, stack, res.Sent)
			}
			checkDelivered(t, min(stack, res.Sent), res.Sent, lost)
		}
		if !c.wantStack && stack > 5 {
			t.Errorf("%s: %d of %d reached the stack, want none", c.src, stack, res.Sent)
		}
		if c.src == "198.18.1.7" {
			if pass, drop, shadow := l.ruleCounts(t, "limited"); pass+drop+shadow != 0 {
				t.Errorf("an allowed source reached its rule: pass %d, drop %d, shadow %d", pass, drop, shadow)
			}
		}
		if c.src == "198.18.2.7" {
			if pass, drop, shadow := l.ruleCounts(t, "open"); pass+drop+shadow != 0 {
				t.Errorf("a denied source reached its rule: pass %d, drop %d, shadow %d", pass, drop, shadow)
			}
		}
		if c.src == "198.18.0.7" {
			pass, drop, shadow := l.ruleCounts(t, "shadowed")
			checkDelivered(t, pass+shadow, res.Sent, lost)
			// Burst 10 at 100/s: all but a few are would-drops.
			if drop != 0 || shadow < (pass+shadow)*9/10 {
				t.Errorf("shadow rule: pass %d, drop %d, shadow %d", pass, drop, shadow)
			}
		}
	}
}
