// SPDX-License-Identifier: Apache-2.0

package maps_test

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/gen"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

// The flow cache (bpf/flows.h) answers before the allow/deny lists, the
// bans and the classifier. These tests first make it answer (a source
// refused twice: the second refusal copies the refused-until entry), then
// change what it skips and require the verdict the full path gives.

// flowHits reads how many packets the flow cache refused.
func flowHits(t *testing.T, l *maps.Limiter) uint64 {
	t.Helper()
	return counter(t, l, maps.CounterFlowCached)
}

// cachedFlow floods pkt at t0 until the flow cache answers, and returns
// the verdicts (a first admission, then refusals).
func cachedFlow(t *testing.T, l *maps.Limiter, pkt []byte) string {
	t.Helper()
	got := letters(repeatRun(t, l, pkt, 5))
	if flowHits(t, l) == 0 {
		t.Fatalf("a flood over its limit (%s) never refused from the flow cache", got)
	}
	return got
}

const flowRule = `
rules:
  - name: udp
    match: {protocol: udp, dst_ports: [53]}
    limit: {algorithm: token_bucket, rate: 1/m, burst: 1}
`

// A reload that puts the source on the allow list keeps the rule, its
// limit and its state (the refused-until entry still refuses the key):
// only the generation's sequence number tells the flow cache that the
// packet is now allowed.
func TestFlowCacheReloadAllow(t *testing.T) {
	testutil.PinCPU(t, 0)
	l := loadWith(t, maps.Options{Clock: maps.ClockMap, TrackAfter: 1}, flowRule)
	pkt := udp4("192.0.2.1").MustBuild()
	if got := cachedFlow(t, l, pkt); got != "PDDDD" {
		t.Fatalf("flood: %s", got)
	}
	if err := l.Apply(xdpltest.Compile(t, "allow: [192.0.2.1/32]\n"+flowRule)); err != nil {
		t.Fatal(err)
	}
	if got := letters(repeatRun(t, l, pkt, 3)); got != "PPP" {
		t.Fatalf("allowed after a reload: %s, want PPP", got)
	}
}

// A ban added by hand moves the ban epoch: the flow cache's answer
// (shadow: passed and counted under the rule) gives way to the ban's drop.
func TestFlowCacheBanEpoch(t *testing.T) {
	testutil.PinCPU(t, 0)
	l := loadWith(t, maps.Options{Clock: maps.ClockMap, TrackAfter: 1}, flowRule+"    action: shadow\n")
	if err := l.EnableBanLookup(); err != nil {
		t.Fatal(err)
	}
	pkt := udp4("192.0.2.1").MustBuild()
	if got := cachedFlow(t, l, pkt); got != "PPPPP" {
		t.Fatalf("shadow flood: %s", got)
	}
	if _, err := l.Ban(netip.MustParsePrefix("192.0.2.1/32"), time.Minute, "test"); err != nil {
		t.Fatal(err)
	}
	if got := letters(repeatRun(t, l, pkt, 3)); got != "DDD" {
		t.Fatalf("banned: %s, want DDD", got)
	}
	if n := counter(t, l, maps.CounterBanDrop); n != 3 {
		t.Fatalf("ban drops %d, want 3", n)
	}
}

// A new limiter's ban epoch is a random word of its own, never the 0 that
// the packets of a generation without bans or fleet windows carry: what a
// flow cache learns from those cannot pass for an entry stamped with the
// epoch, whatever the generation's flags say.
func TestBanEpochSeeded(t *testing.T) {
	seen := map[uint64]bool{}
	for range 2 {
		l := loadWith(t, maps.Options{Clock: maps.ClockMap}, flowRule)
		var e gen.XdplimitXdplBanEpoch
		if err := l.Map(gen.XdplimitMapXdplBanEpoch).Lookup(uint32(0), &e); err != nil {
			t.Fatal(err)
		}
		if e.Datapath != 0 || e.Control == 0 || seen[e.Control] {
			t.Fatalf("a new limiter's ban epoch: %+v (earlier: %v)", e, seen)
		}
		seen[e.Control] = true
	}
}

// A ban the datapath starts moves the epoch too: rule tcp bans its source,
// whose udp flow the flow cache was answering in shadow.
func TestFlowCacheDatapathBan(t *testing.T) {
	testutil.PinCPU(t, 0)
	l := loadWith(t, maps.Options{Clock: maps.ClockMap, TrackAfter: 1}, flowRule+`    action: shadow
  - name: tcp
    match: {protocol: tcp}
    limit: {algorithm: token_bucket, rate: 1/m, burst: 1}
    action: ban
    ban: {for: 1m}
`)
	u := udp4("192.0.2.1")
	u.DstPort = 53
	pkt := u.MustBuild()
	if got := cachedFlow(t, l, pkt); got != "PPPPP" {
		t.Fatalf("shadow flood: %s", got)
	}
	if got := letters(repeatRun(t, l, tcp4("192.0.2.1").MustBuild(), 2)); got != "PD" {
		t.Fatalf("tcp over its limit: %s", got)
	}
	if got := letters(repeatRun(t, l, pkt, 2)); got != "DD" {
		t.Fatalf("udp after the ban: %s, want DD", got)
	}
}

// The flow cache keys on what the generation reads: a source port no rule
// matches and no first level keys on is not part of a flow (a SYN flood
// from random ports is one flow), and one that a key reads is.
func TestFlowCacheFields(t *testing.T) {
	testutil.PinCPU(t, 0)
	l := loadWith(t, maps.Options{Clock: maps.ClockMap, TrackAfter: 1}, flowRule)
	f := udp4("192.0.2.1")
	f.DstPort = 53
	cachedFlow(t, l, f.MustBuild())
	before := flowHits(t, l)
	for sp := range uint16(5) {
		f.SrcPort = 1000 + sp
		if got := xdpltest.Run(t, l, f.MustBuild(), t0); got != xdpDrop {
			t.Fatalf("source port %d: verdict %d, want drop", f.SrcPort, got)
		}
	}
	if got := flowHits(t, l) - before; got != 5 {
		t.Fatalf("%d of 5 packets from other source ports refused from the flow cache, want 5", got)
	}

	// Keyed by source port: each port is its own key, and its first packet
	// passes even though another port's flow is cached.
	l = loadWith(t, maps.Options{Clock: maps.ClockMap, TrackAfter: 1}, `
rules:
  - name: refl
    match: {protocol: udp}
    key: src_ip+src_port
    limit: {algorithm: token_bucket, rate: 1/m, burst: 1}
`)
	f.SrcPort = 53
	cachedFlow(t, l, f.MustBuild())
	f.SrcPort = 123
	if got := letters(repeatRun(t, l, f.MustBuild(), 3)); got != "PDD" {
		t.Fatalf("another source port of a cached flow: %s, want PDD", got)
	}
}

// A ban in shadow is counted, and then the rules judge the packet: a rule
// in shadow that bans must not let through what another rule drops. Every
// packet of the banned source is counted, also once another rule refuses
// it repeatedly: the flow cache, which answers before the ban table, must
// not learn such refusals (it did, and the count stopped at 3 of 6).
func TestShadowBanKeepsRules(t *testing.T) {
	testutil.PinCPU(t, 0)
	l := loadWith(t, maps.Options{Clock: maps.ClockMap, TrackAfter: 1}, `
rules:
  - name: trial
    match: {protocol: tcp}
    limit: {algorithm: token_bucket, rate: 1/m, burst: 1}
    action: shadow
    ban: {for: 1m}
  - name: udp
    match: {protocol: udp}
    limit: {algorithm: token_bucket, rate: 1/m, burst: 1}
`)
	if got := letters(repeatRun(t, l, tcp4("192.0.2.1").MustBuild(), 2)); got != "PP" {
		t.Fatalf("tcp in shadow: %s", got)
	}
	bans, err := l.Bans()
	if err != nil {
		t.Fatal(err)
	}
	if len(bans) != 1 || !bans[0].Shadow {
		t.Fatalf("bans %+v, want one in shadow", bans)
	}
	if got := letters(repeatRun(t, l, udp4("192.0.2.1").MustBuild(), 6)); got != "PDDDDD" {
		t.Fatalf("udp of a source banned in shadow: %s, want PDDDDD", got)
	}
	if n := counter(t, l, maps.CounterBanShadow); n != 6 {
		t.Fatalf("ban shadow %d, want 6 (flow cache hits %d)", n, flowHits(t, l))
	}
	if bans, err = l.Bans(); err != nil || len(bans) != 1 || bans[0].Dropped != 6 {
		t.Fatalf("bans %+v (%v), want one that counted the 6 packets", bans, err)
	}
}

// A per-source limit behind a global one: the flow cache answers for the
// source's level, but the full path checks the global level first and names
// it when it refuses too. A random trace that exhausts the global level now
// and then must give the same verdicts and the same drops by level with the
// caches on and off, and the flow cache must have answered some of the
// packets the global level refused.
func TestFlowCacheBehindGlobal(t *testing.T) {
	testutil.PinCPU(t, 0)
	const policy = `
rules:
  - name: r
    limit: {algorithm: token_bucket, rate: 1/m, burst: 1}
    aggregate:
      - key: global
        limit: {algorithm: token_bucket, rate: 200/s, burst: 4}
`
	drops, hits := cachesAgree(t, policy, 3, func(r *rand.Rand, i int) pktgen.Frame {
		if r.IntN(4) == 0 {
			// a new source: admitted by its own level, spends the global
			return udp4(netip.AddrFrom4([4]byte{198, 51, byte(i >> 8), byte(i)}).String())
		}
		return udp4("192.0.2.1") // the flood
	})
	if hits == 0 || drops[0] == 0 || drops[1] == 0 {
		t.Fatalf("the trace does not test it: %d flow cache hits, drops by level %v", hits, drops)
	}
	t.Logf("drops by level %v, %d answered by the flow cache", drops, hits)
}

// cachesAgree replays a random trace of 3000 packets of rule 0 of policy
// (pick gives packet i, the clock advances up to 2 ms between packets)
// through the program with the refused-until and flow caches off, then on,
// and fails unless the verdicts and the drops by level are the same. It
// returns the drops by level and how many packets the flow cache refused.
func cachesAgree(t *testing.T, policy string, seed uint64, pick func(r *rand.Rand, i int) pktgen.Frame) ([]uint64, uint64) {
	t.Helper()
	trace := func(off bool) (string, []uint64, uint64) {
		l := loadWith(t, maps.Options{Clock: maps.ClockMap, TrackAfter: 1, NoRefusedCache: off}, policy)
		r := rand.New(rand.NewPCG(seed, 5))
		now := uint64(t0)
		var v []uint32
		for i := 0; i < 3000; i++ {
			f := pick(r, i)
			now += uint64(r.IntN(2000)) * uint64(time.Microsecond)
			v = append(v, xdpltest.Run(t, l, f.MustBuild(), time.Duration(now)))
		}
		st, err := l.RuleStats()
		if err != nil {
			t.Fatal(err)
		}
		return letters(v), st[0].LevelDrops, flowHits(t, l)
	}
	offV, offDrops, _ := trace(true)
	onV, onDrops, hits := trace(false)
	for i := range onV {
		if onV[i] != offV[i] {
			t.Fatalf("packet %d: %c with the caches, %c without", i, onV[i], offV[i])
		}
	}
	if !slices.Equal(onDrops, offDrops) {
		t.Fatalf("drops by level: %v with the caches, %v without", onDrops, offDrops)
	}
	return onDrops, hits
}
