// SPDX-License-Identifier: Apache-2.0

package pktgen

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
)

// BenchmarkSend measures the generator's rate with 64-byte frames (60 plus
// the FCS) from 1000 sequential sources, on 1 and 2 CPUs, with the peer
// dropping in XDP (the generator's ceiling) or passing to the stack. One
// op is one frame; run with e.g. -benchtime=5000000x. Mpps/CPU-s divides
// by the senders' CPU time, which other load on the machine does not
// dilute (wall-clock Mpps does).
func BenchmarkSend(b *testing.B) {
	testutil.RequireLiveFrames(b)
	for _, sink := range []struct {
		name string
		mode SinkMode
	}{{"drop", SinkDrop}, {"pass", SinkPass}} {
		for _, ncpu := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/cpus=%d", sink.name, ncpu), func(b *testing.B) {
				cpus := cpuList(ncpu)
				if len(cpus) < ncpu {
					b.Skipf("only %d CPUs", len(cpus))
				}
				v := testutil.NewVethPair(b, testutil.VethConfig{Queues: 2})
				s, err := AttachSink(v.PeerNS.Path(), v.PeerName, sink.mode)
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				g, err := Open(Config{Sources: Sources{Mode: Sequential, Count: 1000}, Timeout: 5 * time.Minute})
				if err != nil {
					b.Fatal(err)
				}
				defer g.Close()
				frame := SetMACs(UDP4(v.Addr, v.PeerAddr, 40000, 9, 18), v.MAC, v.PeerMAC)
				b.ResetTimer()
				res, err := g.Send(context.Background(), v.NS.Path(), v.Name, frame, uint64(b.N), cpus...)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(res.Mpps(), "Mpps")
				b.ReportMetric(res.PPSPerCPU()/1e6, "Mpps/CPU-s")
			})
		}
	}
}
