// SPDX-License-Identifier: Apache-2.0

package maps_test

import (
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/gen"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/maps"
)

// BenchmarkBanLookup is the per-packet cost of the ban lookup for a source
// that is not banned (every packet of a policy with bans pays it), with
// the lookup off, and on with 1 and 4096 banned /32s and a mix of prefix
// lengths in the trie. Run under the flood lock; see docs/design.md.
func BenchmarkBanLookup(b *testing.B) {
	const yaml = `
rules:
  - name: udp
    limit: {algorithm: token_bucket, rate: 100M/s, burst: 100M}
`
	pkt := udp4("198.51.100.9").MustBuild()
	for _, c := range []struct {
		name  string
		bans  int
		mixed bool
	}{{"off", 0, false}, {"on-1", 1, false}, {"on-4096", 4096, false}, {"on-4096-mixed", 4096, true}} {
		b.Run(c.name, func(b *testing.B) {
			l := xdpltest.Load(b, maps.Options{Clock: maps.ClockKtime, MaxSources: 1 << 16, MaxBans: 1 << 13}, yaml)
			// Straight into the maps: Ban reads the whole table per ban.
			for i := range c.bans {
				bits := 32
				if c.mixed {
					bits = []int{32, 24, 16, 28}[i%4]
				}
				a := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
				p, err := a.Prefix(bits)
				if err != nil {
					b.Fatal(err)
				}
				v := gen.XdplimitXdplBan{ExpiresNs: 1 << 62, Family: 4, Prefixlen: uint32(bits)}
				copy(v.Addr[:], p.Addr().AsSlice())
				k := gen.XdplimitXdplBanKey4{Prefixlen: uint32(bits), Addr: p.Addr().As4()}
				if err := l.Map(gen.XdplimitMapXdplBans).Update(uint32(i), &v, ebpf.UpdateAny); err != nil {
					b.Fatal(err)
				}
				if err := l.Map(gen.XdplimitMapXdplBan4).Update(&k, uint32(i), ebpf.UpdateAny); err != nil {
					b.Fatal(err)
				}
			}
			if c.bans > 0 {
				if err := l.EnableBanLookup(); err != nil {
					b.Fatal(err)
				}
			}
			testutil.PinCPU(b, 0)
			b.ResetTimer()
			_, per, err := l.Program().Benchmark(pkt, b.N, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(per.Nanoseconds()), "ns/pkt")
		})
	}
}
