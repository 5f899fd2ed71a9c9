// SPDX-License-Identifier: Apache-2.0

package maps_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/model"
)

// TestSlidingLogExact replays random traces with injected time through the
// program and through an exact log kept by the test (model.ExactLog, which
// shares no code with the datapath's model), for every key kind, and
// requires the same verdict for every packet.
func TestSlidingLogExact(t *testing.T) {
	srcs := []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2"),
		netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("2001:db8::1")}
	ports := []uint16{22, 443}
	for ci, c := range []struct {
		name, key string
		// keyOf: which log the test charges a packet to.
		keyOf func(src netip.Addr, port uint16) string
		// more: the rest of the rule (an aggregate level that never
		// refuses, to take the two-phase path).
		more string
	}{
		{"src_ip", "src_ip", func(s netip.Addr, _ uint16) string { return s.String() }, ""},
		{"prefix", "{ipv4_prefix: 24, ipv6_prefix: 64}", func(s netip.Addr, _ uint16) string {
			if s.Is4() {
				return netip.PrefixFrom(s, 24).Masked().String()
			}
			return netip.PrefixFrom(s, 64).Masked().String()
		}, ""},
		{"src_ip+dst_port", "src_ip+dst_port", func(s netip.Addr, p uint16) string { return fmt.Sprint(s, p) }, ""},
		{"global", "global", func(netip.Addr, uint16) string { return "" }, ""},
		{"src_ip under an aggregate", "src_ip", func(s netip.Addr, _ uint16) string { return s.String() },
			"    aggregate:\n      - key: global\n        limit: {algorithm: token_bucket, rate: 1000000/s, burst: 1000000}\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(ci), 13))
			for trial := 0; trial < 3; trial++ {
				n := 1 + r.IntN(64)
				w := time.Duration(1+r.IntN(200)) * time.Millisecond
				yaml := fmt.Sprintf("rules:\n  - name: r\n    match: {protocol: udp}\n    key: %s\n    limit: {algorithm: sliding_log, packets: %d, window: %v}\n%s", c.key, n, w, c.more)
				l := loadWith(t, maps.Options{Clock: maps.ClockMap}, yaml)
				logs := map[string]*model.ExactLog{}
				now := uint64(t0)
				// From under the limit to eight times over it, per key.
				gap := uint64(w) / uint64(1+n*(1+r.IntN(8)))
				admitted := 0
				for i := 0; i < 2000; i++ {
					now += r.Uint64N(2*gap + 1)
					if r.IntN(200) == 0 {
						now += uint64(2 * w)
					}
					src, port := srcs[r.IntN(len(srcs))], ports[r.IntN(len(ports))]
					k := c.keyOf(src, port)
					if logs[k] == nil {
						logs[k] = model.NewExactLog(uint64(w), n)
					}
					want := uint32(xdpDrop)
					if logs[k].Admit(now) {
						want = xdpPass
						admitted++
					}
					f := udp4(src.String())
					if src.Is6() {
						f = udp6(src.String())
					}
					f.DstPort = port
					if got := xdpltest.Run(t, l, f.MustBuild(), time.Duration(now)); got != want {
						t.Fatalf("%d per %v: packet %d (%v port %d, t=%d): program %s, exact log %s",
							n, w, i, src, port, now, letters([]uint32{got}), letters([]uint32{want}))
					}
				}
				t.Logf("%d per %v: %d of 2000 admitted, as the exact log", n, w, admitted)
			}
		})
	}
}

// TestSlidingLogReload: a reload that keeps the level keeps its logs; one
// that changes the limit starts empty ones.
func TestSlidingLogReload(t *testing.T) {
	policyWith := func(n int) string {
		return fmt.Sprintf("rules:\n  - name: r\n    limit: {algorithm: sliding_log, packets: %d, window: 1m}\n", n)
	}
	l := loadWith(t, maps.Options{Clock: maps.ClockMap}, policyWith(3))
	pkt := udp4("192.0.2.1").MustBuild()
	if got := letters(repeatRun(t, l, pkt, 5)); got != "PPPDD" {
		t.Errorf("first policy: %s, want 3 admitted", got)
	}
	for _, c := range []struct {
		n    int
		want string
	}{{3, "DD"}, {4, "PPPPD"}} {
		if err := l.Apply(xdpltest.Compile(t, policyWith(c.n))); err != nil {
			t.Fatal(err)
		}
		if got := letters(repeatRun(t, l, pkt, len(c.want))); got != c.want {
			t.Errorf("after a reload to %d per minute: %s, want %s", c.n, got, c.want)
		}
	}
}

// TestSlidingLogShadow: in shadow mode nothing is dropped; packets over
// the log's limit are counted as would-drops and not logged.
func TestSlidingLogShadow(t *testing.T) {
	l := loadWith(t, maps.Options{Clock: maps.ClockMap}, "mode: shadow\nrules:\n  - name: r\n    limit: {algorithm: sliding_log, packets: 2, window: 1s}\n")
	pkt := udp4("192.0.2.1").MustBuild()
	if got := letters(repeatRun(t, l, pkt, 5)); got != "PPPPP" {
		t.Errorf("shadow mode: %s, want every packet passed", got)
	}
	stats, err := l.RuleStats()
	if err != nil {
		t.Fatal(err)
	}
	if pass, shadow := stats[0].Verdicts[maps.VerdictPass].Packets, stats[0].Verdicts[maps.VerdictShadow].Packets; pass != 2 || shadow != 3 {
		t.Errorf("counted %d admitted and %d would-drops, want 2 and 3", pass, shadow)
	}
}

// TestSlidingLogAcrossCPUs offers one source's packets from both CPUs at
// once on the real clock, each packet its own test run timed by the test.
// An admitted packet was logged at some time within its run; the test
// counts, for each admitted packet, the admissions whose runs lie wholly
// within the window after its run began: those were surely admitted within
// one window. The largest such count must equal the limit: reached, never
// above (a log per CPU would show twice the limit).
func TestSlidingLogAcrossCPUs(t *testing.T) {
	testutil.Require(t, runtime.NumCPU() >= 2, "needs 2 CPUs, have %d", runtime.NumCPU())
	const n, window = 8, 2 * time.Millisecond
	l := load(t, maps.ClockKtime, fmt.Sprintf("rules:\n  - name: r\n    limit: {algorithm: sliding_log, packets: %d, window: %v}\n", n, window))
	pkt := udp4("192.0.2.1").MustBuild()
	type span struct{ begin, end int64 }
	var mu sync.Mutex
	var spans []span
	perCPU := make([]int, 2)
	deadline := mono() + int64(200*time.Millisecond)
	err := onBothCPUs(func(cpu int) error {
		var mine []span
		for mono() < deadline {
			b := mono()
			ret, err := l.Program().Run(&ebpf.RunOptions{Data: pkt, Repeat: 1})
			if err != nil {
				return err
			}
			if ret == xdpPass {
				mine = append(mine, span{b, mono()})
			}
		}
		mu.Lock()
		defer mu.Unlock()
		spans = append(spans, mine...)
		perCPU[cpu] = len(mine)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(spans, func(a, b span) int { return int(a.begin - b.begin) })
	worst := 0
	for i, s := range spans {
		c := 0
		for _, o := range spans[i:] {
			if o.begin >= s.begin+int64(window) {
				break
			}
			if o.end < s.begin+int64(window) {
				c++
			}
		}
		worst = max(worst, c)
	}
	t.Logf("admitted %d (CPU 0: %d, CPU 1: %d) in 200 ms; most surely within one %v window: %d (limit %d)",
		len(spans), perCPU[0], perCPU[1], window, worst, n)
	if perCPU[0] == 0 || perCPU[1] == 0 {
		t.Errorf("a CPU had no admission: the test did not spread the source")
	}
	if worst != n {
		t.Errorf("worst window holds %d admissions, want the limit %d", worst, n)
	}
}
