// SPDX-License-Identifier: Apache-2.0

package replay

import (
	"cmp"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/model"
	"github.com/xdplimit/xdplimit/pktgen"
	"github.com/xdplimit/xdplimit/policy"
)

// sourcePolicy has a rule of each algorithm, one with a global aggregate
// and one keyed by a /24.
const sourcePolicy = `
rules:
  - name: tb
    match: {protocol: udp, dst_ports: [53]}
    limit: {algorithm: token_bucket, rate: 100/s, burst: 20}
    aggregate:
      - key: global
        limit: {algorithm: token_bucket, rate: 300/s, burst: 50}
  - name: fw
    match: {protocol: udp, dst_ports: [123]}
    key: {ipv4_prefix: 24}
    limit: {algorithm: fixed_window, packets: 30, window: 200ms}
  - name: sw
    match: {protocol: udp, dst_ports: [443]}
    limit: {algorithm: sliding_window, packets: 40, window: 500ms}
  - name: log
    match: {protocol: tcp, dst_ports: [22]}
    limit: {algorithm: sliding_log, packets: 5, window: 1s}
`

// TestSourceAgreesWithModel: what `policy test --source` reports for an
// address at the end of a replayed trace (maps.Limiter.Source, which
// `status --source` and GET /v1/sources/ADDR read too) is what the
// reference model's state of each of its keys allows then: the same
// limit and remaining, the same next-admit and reset times to the
// nanosecond (a replay's clock is the capture's, with no tick), and
// tracked exactly when the model holds state for the key.
func TestSourceAgreesWithModel(t *testing.T) {
	p := parsePolicy(t, sourcePolicy)
	ports := []uint16{53, 123, 443, 22}
	srcs := []netip.Addr{netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("198.51.100.8"),
		netip.MustParseAddr("203.0.113.9"), netip.MustParseAddr("192.0.2.1")}
	frames := sourceTrace(srcs, ports)
	m := modelOf(t, p)
	want := expected(p, m, frames, 0)
	got := replayFile(t, p, writeCapture(t, pcapNanos, frames), Options{Sources: srcs})
	compare(t, got, want)
	now := clockOf(frames, frames[len(frames)-1])

	if len(got.Sources) != len(srcs) {
		t.Fatalf("%d sources reported, %d asked", len(got.Sources), len(srcs))
	}
	for i, s := range got.Sources {
		if s.Address != srcs[i] || len(s.Rules) != len(p.Rules) {
			t.Fatalf("source %v: %d rules, want %v and %d", s.Address, len(s.Rules), srcs[i], len(p.Rules))
		}
		for r, rule := range s.Rules {
			for lv, level := range rule.Levels {
				l := m.rules[r].levels[lv]
				k := mKey{rule: r, level: lv}
				if l.kind != policy.KeyGlobal {
					bits := l.p4
					k.src = netip.PrefixFrom(srcs[i], bits).Masked().Addr()
				}
				st, tracked := m.states[k]
				if !tracked {
					st = &model.State{}
				}
				b := st.Budget(l.params, now)
				if level.Budget != b || level.Tracked != tracked || !level.Known {
					t.Errorf("%v, rule %s level %d: %+v (tracked %v); the model's state allows %+v (tracked %v)",
						srcs[i], rule.Name, lv, level.Budget, level.Tracked, b, tracked)
				}
			}
		}
	}
	refused := 0
	for _, s := range got.Sources {
		for _, r := range s.Rules {
			if r.Levels[0].Remaining == 0 {
				refused++
			}
		}
	}
	if refused == 0 {
		t.Error("no key is refused at the end: the trace does not test what it should")
	}
}

// sourceTrace is 6000 frames in bursts from each source to each rule's
// port (ports[r] is rule r's) over 2 s, heavier for the first sources:
// some keys refused at the end, some not.
func sourceTrace(srcs []netip.Addr, ports []uint16) []rec {
	rng := rand.New(rand.NewPCG(7, 8))
	var frames []rec
	for i := 0; i < 6000; i++ {
		s, r := rng.IntN(len(srcs)-1), rng.IntN(len(ports))
		s = min(s, rng.IntN(len(srcs)))
		at := time.Duration(rng.Int64N(int64(2 * time.Second)))
		data := pktgen.UDP4(srcs[s], dst4, 4000, ports[r], 40)
		if ports[r] == 22 {
			data = pktgen.TCP4(srcs[s], dst4, 40000, 22, pktgen.TCPSyn, 0)
		}
		frames = append(frames, rec{at: at, data: data, why: maps.WhyRule, rule: r, src: srcs[s]})
	}
	slices.SortStableFunc(frames, func(a, b rec) int { return cmp.Compare(a.at, b.at) })
	return frames
}
