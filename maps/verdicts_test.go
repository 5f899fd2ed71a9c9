// SPDX-License-Identifier: Apache-2.0

package maps_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

// step is packets sent at one instant and the verdicts they get.
type step struct {
	f    pktgen.Frame
	at   time.Duration
	want string // sequence of P/D, one per packet sent at the same instant
}

func TestVerdictFixtures(t *testing.T) {
	tb := `
rules:
  - name: tb
    match: {protocol: udp, dst_ports: [53]}
    limit: {algorithm: token_bucket, rate: 10/s, burst: 5}
`
	cases := []struct {
		name   string
		policy string
		steps  []step
	}{
		{"token bucket burst then refill", tb, []step{
			{udp4("192.0.2.10"), t0, "PPPPPDD"},
			{udp4("192.0.2.10"), t0 + 99*time.Millisecond, "D"},
			{udp4("192.0.2.10"), t0 + 100*time.Millisecond, "PD"},
			{udp4("192.0.2.10"), t0 + 350*time.Millisecond, "PPD"},
			{udp4("192.0.2.11"), t0 + 350*time.Millisecond, "PPPPPD"}, // its own bucket
			{udp4("192.0.2.10"), t0 + 10*time.Second, "PPPPPD"},       // full again, capped at burst
		}},
		{"token bucket ipv6 /64 shares one bucket", tb, []step{
			{udp6("2001:db8:1:2::1"), t0, "PPP"},
			{udp6("2001:db8:1:2:ffff::9"), t0, "PPD"},
			{udp6("2001:db8:1:3::1"), t0, "PPPPPD"},
		}},
		{"vlan tagged and double tagged frames are parsed", tb, []step{
			{with(udp4("192.0.2.20"), func(f *pktgen.Frame) { f.VLANs = []pktgen.VLAN{{ID: 100}} }), t0, "PPPPPD"},
			{with(udp4("192.0.2.21"), func(f *pktgen.Frame) { f.VLANs = qinq(100, 200) }), t0, "PPPPPD"},
			{with(udp6("2001:db8::21"), func(f *pktgen.Frame) { f.VLANs = qinq(7, 8) }), t0, "PPPPPD"},
		}},
		{"ipv6 extension headers are walked", tb, []step{
			{with(udp6("2001:db8::30"), func(f *pktgen.Frame) { f.Ext = destOpts(3) }), t0, "PPPPPD"},
			// Sources in other /64s (the default IPv6 key): 7 headers are
			// walked; 40, beyond the bound, are judged by source as a
			// fragment would be, never passed unjudged.
			{with(udp6("2001:db8:0:1::31"), func(f *pktgen.Frame) { f.Ext = destOpts(7) }), t0, "PPPPPD"},
			{with(udp6("2001:db8:0:2::31"), func(f *pktgen.Frame) { f.Ext = destOpts(40) }), t0, "PPPPPD"},
		}},
		{"non-first fragments are limited by address", tb, []step{
			{nonFirst(udp4("192.0.2.40"), 100), t0, "PPPPPD"},
			{udp4("192.0.2.40"), t0, "D"}, // same bucket as its fragments
			{nonFirst(udp6("2001:db8::40"), 100), t0, "PPPPPD"},
		}},
		{"unmatched traffic passes", tb, []step{
			{with(udp4("192.0.2.50"), func(f *pktgen.Frame) { f.DstPort = 54 }), t0, "PPPPPPPPPP"},
			{with(udp4("192.0.2.50"), func(f *pktgen.Frame) { f.Proto, f.TCPFlags = pktgen.ProtoTCP, pktgen.TCPSyn }), t0, "PPPPPPPP"},
		}},
		{"first matching rule wins", `
rules:
  - name: dns
    match: {protocol: udp, dst_ports: [53]}
    limit: {algorithm: token_bucket, rate: 1/s, burst: 2}
  - name: all
    limit: {algorithm: token_bucket, rate: 1/s, burst: 4}
`, []step{
			{udp4("192.0.2.60"), t0, "PPDD"},
			{with(udp4("192.0.2.60"), func(f *pktgen.Frame) { f.DstPort = 80 }), t0, "PPPPD"},
			{with(udp4("192.0.2.60"), func(f *pktgen.Frame) { f.Proto = pktgen.ProtoICMP }), t0, "D"}, // shares "all"'s bucket
		}},
		{"allow never limited, deny always dropped, longest prefix decides", `
rules:
  - name: all
    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}
allow: [192.0.2.0/24, "2001:db8:a::/48"]
deny: [198.51.100.0/24, 192.0.2.128/25]
`, []step{
			{udp4("192.0.2.1"), t0, "PPPPP"},
			{udp4("192.0.2.200"), t0, "DDD"},
			{udp4("198.51.100.7"), t0, "DDD"},
			{udp6("2001:db8:a::1"), t0, "PPPP"},
			{udp4("203.0.113.1"), t0, "PD"},
		}},
		// Host addresses live in hash maps, shorter prefixes in the tries:
		// a host still beats the prefix around it, either way round.
		{"host entries beat the prefixes around them", `
rules:
  - name: all
    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}
allow: [192.0.2.0/24, 198.51.100.9/32, "2001:db8:b::5/128"]
deny: [198.51.100.0/24, 192.0.2.77/32, "2001:db8:b::/48"]
`, []step{
			{udp4("198.51.100.9"), t0, "PPPP"},
			{udp4("198.51.100.8"), t0, "DDD"},
			{udp4("192.0.2.77"), t0, "DDD"},
			{udp4("192.0.2.1"), t0, "PPPP"},
			{udp6("2001:db8:b::5"), t0, "PPPP"},
			{udp6("2001:db8:b::6"), t0, "DDD"},
			{udp4("203.0.113.1"), t0, "PD"},
		}},
		{"host entries only", `
rules:
  - name: all
    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}
allow: [192.0.2.9/32]
deny: [192.0.2.10/32, "2001:db8::10/128"]
`, []step{
			{udp4("192.0.2.9"), t0, "PPPP"},
			{udp4("192.0.2.10"), t0, "DDD"},
			{udp6("2001:db8::10"), t0, "DDD"},
			{udp4("192.0.2.11"), t0, "PD"},
		}},
		{"fixed window", `
rules:
  - name: fw
    limit: {algorithm: fixed_window, packets: 3, window: 1s}
`, []step{
			{udp4("192.0.2.70"), t0 + 900*time.Millisecond, "PPPD"},
			{udp4("192.0.2.70"), t0 + 999*time.Millisecond, "D"},
			{udp4("192.0.2.70"), t0 + 1000*time.Millisecond, "PPPD"},
			{udp4("192.0.2.70"), t0 + 5500*time.Millisecond, "PPPD"},
		}},
		{"sliding window weighs the previous window", `
rules:
  - name: sw
    limit: {algorithm: sliding_window, packets: 4, window: 1s}
`, []step{
			{udp4("192.0.2.80"), t0, "PPPPD"},
			// 250 ms into the next window: 4 * 0.75 = 3 from the previous.
			{udp4("192.0.2.80"), t0 + 1250*time.Millisecond, "PD"},
			// 750 ms in: 4 * 0.25 = 1 + 1 current: 2 more.
			{udp4("192.0.2.80"), t0 + 1750*time.Millisecond, "PPD"},
			{udp4("192.0.2.80"), t0 + 3000*time.Millisecond, "PPPPD"},
		}},
		{"shadow action passes what it would drop", `
rules:
  - name: sh
    limit: {algorithm: token_bucket, rate: 1/s, burst: 2}
    action: shadow
`, []step{{udp4("192.0.2.90"), t0, "PPPPP"}}},
		{"tcp syn rule", `
rules:
  - name: syn
    match: {protocol: tcp, tcp_flags: [syn]}
    limit: {algorithm: token_bucket, rate: 1/s, burst: 2}
`, []step{
			{with(udp4("192.0.2.95"), func(f *pktgen.Frame) { f.Proto, f.TCPFlags = pktgen.ProtoTCP, pktgen.TCPSyn }), t0, "PPDD"},
			{with(udp4("192.0.2.95"), func(f *pktgen.Frame) { f.Proto, f.TCPFlags = pktgen.ProtoTCP, pktgen.TCPSyn|pktgen.TCPAck }), t0, "PPPP"},
		}},
		{"byte rate", `
rules:
  - name: bytes
    limit: {algorithm: token_bucket, rate: 1000B/s, burst: 300}
`, []step{
			// 42-byte headers + 58 payload = 100-byte frames.
			{with(udp4("192.0.2.99"), func(f *pktgen.Frame) { f.Payload = 58 }), t0, "PPPD"},
			{with(udp4("192.0.2.99"), func(f *pktgen.Frame) { f.Payload = 58 }), t0 + 100*time.Millisecond, "PD"},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := load(t, maps.ClockMap, c.policy)
			for i, s := range c.steps {
				pkt := s.f.MustBuild()
				want := verdicts(s.want)
				var got []uint32
				for range want {
					got = append(got, xdpltest.Run(t, l, pkt, s.at))
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("step %d (%s at %v): verdicts %s, want %s", i, s.f.Src, s.at-t0, letters(got), s.want)
				}
			}
		})
	}
}

// qinq is an 802.1ad outer tag around an 802.1Q inner one.
func qinq(outer, inner uint16) []pktgen.VLAN {
	return []pktgen.VLAN{{TPID: 0x88a8, ID: outer}, {ID: inner}}
}

// destOpts is n IPv6 destination-options headers, each 8 bytes with one
// PadN option.
func destOpts(n int) []pktgen.ExtHeader {
	return slices.Repeat([]pktgen.ExtHeader{pktgen.ExtDestOpts}, n)
}
