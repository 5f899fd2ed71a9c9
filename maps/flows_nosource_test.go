// SPDX-License-Identifier: Apache-2.0

package maps_test

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

// A rule whose first level is global refuses every packet it matches while
// that level refuses, whatever the source. The flow cache keeps such a
// refusal under a key without the source (bpf/flows.h), looked up after
// the allow/deny lists and the bans, so that a spoofed flood is one flow
// instead of one full walk per packet. These tests flood from sources never
// seen before, which a key with the source could never answer.

// spoofed is the i-th source of a spoofed flood: a new address each time.
func spoofed(i int) pktgen.Frame {
	return udp4(netip.AddrFrom4([4]byte{203, 0, byte(i >> 8), byte(i)}).String())
}

// noSourceRules: a per-source level behind a global one (the compiler's
// order) with limit global.
func noSourceRules(global string) string {
	return `
rules:
  - name: r
    match: {protocol: udp}
    limit: {algorithm: token_bucket, rate: 1/m, burst: 1}
    aggregate:
      - key: global
        limit: ` + global + "\n"
}

// noSourcePolicy: noSourceRules, and one source on the allow list.
func noSourcePolicy(global string) string {
	return "\nallow: [198.51.100.7/32]" + noSourceRules(global)
}

// The global level admits three packets, then refuses: the first refusal
// is noted in the refused-until cache, the second copied into the flow
// cache, and every later source is refused there. An allow-listed source
// still passes in the middle of the flood.
func TestFlowCacheNoSource(t *testing.T) {
	testutil.PinCPU(t, 0)
	l := loadWith(t, maps.Options{Clock: maps.ClockMap, TrackAfter: 1}, noSourcePolicy("{algorithm: token_bucket, rate: 1/m, burst: 3}"))
	var v []uint32
	for i := 0; i < 40; i++ {
		v = append(v, xdpltest.Run(t, l, spoofed(i).MustBuild(), t0))
	}
	if got, want := letters(v), "PPP"+string(slices.Repeat([]byte{'D'}, 37)); got != want {
		t.Fatalf("spoofed flood: %s, want %s", got, want)
	}
	if hits := flowHits(t, l); hits != 35 {
		t.Fatalf("%d of the flood's refusals from the flow cache, want 35 (all but the first two)", hits)
	}
	allowed := udp4("198.51.100.7").MustBuild()
	if got := letters(repeatRun(t, l, allowed, 3)); got != "PPP" {
		t.Fatalf("an allow-listed source during the flood: %s, want PPP", got)
	}
	st, err := l.RuleStats()
	if err != nil {
		t.Fatal(err)
	}
	// Every refusal is the global level's (origin 1: the aggregate).
	if drops := st[0].LevelDrops; drops[1] != 37 || drops[0] != 0 {
		t.Fatalf("drops by level %v, want 37 by the global level", drops)
	}
}

// Where a rule picks packets by their source, the source may change the
// rule: no refusal is kept without it.
func TestFlowCacheNoSourceNotWhereRulesReadSources(t *testing.T) {
	testutil.PinCPU(t, 0)
	l := loadWith(t, maps.Options{Clock: maps.ClockMap, TrackAfter: 1}, `
rules:
  - name: r
    match: {protocol: udp, src_cidrs: [203.0.0.0/16]}
    limit: {algorithm: token_bucket, rate: 1/m, burst: 1}
    aggregate:
      - key: global
        limit: {algorithm: token_bucket, rate: 1/m, burst: 3}
`)
	var v []uint32
	for i := 0; i < 20; i++ {
		v = append(v, xdpltest.Run(t, l, spoofed(i).MustBuild(), t0))
	}
	if got := letters(v); got != "PPP"+string(slices.Repeat([]byte{'D'}, 17)) {
		t.Fatalf("spoofed flood: %s", got)
	}
	if hits := flowHits(t, l); hits != 0 {
		t.Fatalf("%d refusals from the flow cache for sources never seen, want 0", hits)
	}
}

// A random trace of new sources, repeated sources and allow-listed ones,
// with a global level that refills now and then, gives the same verdicts
// and the same drops by level with the caches on and off, and the flow
// cache answered for sources it had not seen.
func TestFlowCacheNoSourceAgreement(t *testing.T) {
	testutil.PinCPU(t, 0)
	policy := noSourcePolicy("{algorithm: token_bucket, rate: 200/s, burst: 4}")
	drops, hits := cachesAgree(t, policy, 7, func(r *rand.Rand, i int) pktgen.Frame {
		switch r.IntN(8) {
		case 0:
			return udp4("198.51.100.7") // allowed
		case 1:
			return spoofed(r.IntN(i + 1)) // seen before
		}
		return spoofed(i)
	})
	if hits < 100 || drops[1] == 0 {
		t.Fatalf("the trace does not test it: %d flow cache hits, drops by level %v", hits, drops)
	}
	t.Logf("drops by level %v, %d answered by the flow cache", drops, hits)
}

// Where nothing before the rule reads the source (no allow/deny list, no
// ban lookup, no cookie check), the flow cache is looked up without the
// source first, in the stage that keys it with the source; where something
// does, after it. A cut after that stage, on the maps of a program that
// learned a spoofed flood's refusal, tells which: the flow cache answers
// a new source's packet there (its hit is counted) only in the first case.
func TestFlowCacheNoSourceFirst(t *testing.T) {
	const global = "{algorithm: token_bucket, rate: 1/m, burst: 3}"
	noLists := noSourceRules(global)
	const cookies = `
  - name: syn
    match: {protocol: tcp, dst_ports: [8080], tcp_flags: [syn]}
    limit: {algorithm: token_bucket, rate: 1/m, burst: 1}
    action: syncookie
`
	for _, c := range []struct {
		name, policy string
		bans, first  bool
	}{
		{"nothing reads the source", noLists, false, true},
		{"an allow list", noSourcePolicy(global), false, false},
		{"the ban lookup on", noLists, true, false},
		{"a cookie rule", noLists + cookies, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			testutil.PinCPU(t, 0) // the flow cache is per CPU
			whole := loadWith(t, maps.Options{Clock: maps.ClockMap, TrackAfter: 1}, c.policy)
			if c.bans {
				if err := whole.EnableBanLookup(); err != nil {
					t.Fatal(err)
				}
			}
			var v []uint32
			for i := 0; i < 10; i++ {
				v = append(v, xdpltest.Run(t, whole, spoofed(i).MustBuild(), t0))
			}
			// As TestFlowCacheNoSource: all but the first five from the
			// flow cache, wherever it is looked up.
			hits := flowHits(t, whole)
			if got := letters(v); got != "PPPDDDDDDD" || hits != 5 {
				t.Fatalf("spoofed flood: %s, %d from the flow cache; want PPPDDDDDDD, 5", got, hits)
			}
			cut, err := maps.Load(maps.Options{Clock: maps.ClockMap, BenchStop: maps.StopFlows, Pinned: whole.Maps()})
			if err != nil {
				t.Fatal(err)
			}
			defer cut.Close()
			if got := xdpltest.Run(t, cut, spoofed(100).MustBuild(), t0); got != xdpDrop {
				t.Fatalf("the cut's verdict %d, want XDP_DROP", got)
			}
			want := hits
			if c.first {
				want++
			}
			if got := flowHits(t, whole); got != want {
				t.Fatalf("%d packets from the flow cache after the cut's, want %d", got, want)
			}
		})
	}
}
