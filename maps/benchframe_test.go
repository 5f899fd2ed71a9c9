// SPDX-License-Identifier: Apache-2.0

package maps_test

import (
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/maps"
)

// TestBenchFrame: the benchmarks' frame restore (Options.BenchFrame) gives
// every repeated run the SYN, where the kernel would re-run the SYN-ACK
// the first answer left in the buffer.
func TestBenchFrame(t *testing.T) {
	syn := cookieSYN("192.0.2.7", "198.51.100.1").MustBuild()
	const runs = 100
	for _, c := range []struct {
		name    string
		restore bool
		// what the rule counts: the first SYN is admitted, the second
		// passed to keep the listener accepting cookies, and every
		// later one answered
		cookies uint64
	}{{"restored", true, runs - 2}, {"not restored", false, 1}} {
		t.Run(c.name, func(t *testing.T) {
			opts := maps.Options{Clock: maps.ClockMap}
			if c.restore {
				opts.BenchFrame = syn
			}
			l := loadWith(t, opts, cookiePolicy)
			if err := l.SetClock(uint64(time.Minute)); err != nil {
				t.Fatal(err)
			}
			out := make([]byte, len(syn)+256)
			ro := &ebpf.RunOptions{Data: syn, DataOut: out, Repeat: runs}
			v, err := l.Program().Run(ro)
			if err != nil {
				t.Fatal(err)
			}
			stats, err := l.RuleStats()
			if err != nil {
				t.Fatal(err)
			}
			got := stats[0].Verdicts[maps.VerdictCookie].Packets
			t.Logf("last verdict %d; rule: pass %d, answered %d", v, stats[0].Verdicts[maps.VerdictPass].Packets, got)
			if got != c.cookies {
				t.Errorf("the rule answered %d of %d runs, want %d", got, runs, c.cookies)
			}
			if c.restore {
				if v != xdpTX {
					t.Errorf("last verdict %d, want XDP_TX", v)
				}
				synAck(t, ro.DataOut)
			}
		})
	}
	if _, err := maps.Load(maps.Options{Clock: maps.ClockMap, BenchFrame: make([]byte, 129)}); err == nil {
		t.Error("a 129-byte bench frame was accepted")
	}
}
