// SPDX-License-Identifier: Apache-2.0

package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xdplimit/xdplimit/fleet"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/maps"
)

// Anyone who can write the fleet's Redis can write its ban hash. Hostile
// entries written there with redis-cli: bans of the whole Internet (IPv4,
// IPv6, IPv4-mapped), a reason that would retitle and clear a terminal,
// fields that are not prefixes, values that are not bans, expiries in the
// past and far ahead, an entry of 10 kB, then 100k valid bans. Every host
// goes on syncing and enforcing its limits, applies only what the bans:
// section allows (at most max_per_sync a sync, max_imported in all), and
// says so once per kind in its log and in its metrics.
func TestFleetBansHostile(t *testing.T) {
	h := newHostileFleet(t)
	h.writeHostile()
	for range 3 {
		h.sync()
	}
	h.checkOnlyEscapedBan()
	h.checkHashKeepsRefused()
	h.checkRefusalsReported()

	// 100k valid bans: each sync applies at most 1000, and the hosts hold
	// 3000 from the fleet at most (the one above included), reading the
	// hash a part per sync.
	h.writeMass()
	for round := 1; round <= 5; round++ {
		h.sync()
		h.checkHeld(round)
	}
	h.checkMassReported()
	h.checkStillEnforces()
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	in := map[string]bool{}
	for _, s := range a {
		in[s] = true
	}
	for _, s := range b {
		if !in[s] {
			return false
		}
	}
	return true
}

// gathered is the value of the series of family name whose label has
// value ("" for a family of one series).
func gathered(t *testing.T, c prometheus.Collector, name, label, value string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := label == ""
			for _, lp := range m.GetLabel() {
				match = match || lp.GetName() == label && lp.GetValue() == value
			}
			if !match {
				continue
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue()
			case m.Gauge != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no series %s{%s=%q}", name, label, value)
	return 0
}

// refusingTable is a ban table whose datapath refuses the bans of some
// prefixes, as a full trie would.
type refusingTable struct {
	*maps.Limiter
	refuse map[netip.Prefix]bool
}

func (r refusingTable) BanAll(reqs []maps.BanRequest) ([]maps.BanResult, error) {
	var pass []maps.BanRequest
	for _, q := range reqs {
		if !r.refuse[q.Prefix] {
			pass = append(pass, q)
		}
	}
	got, err := r.Limiter.BanAll(pass)
	res := make([]maps.BanResult, len(reqs))
	for i, q := range reqs {
		if r.refuse[q.Prefix] {
			res[i].Err = errors.New("no space left on device")
			continue
		}
		res[i], got = got[0], got[1:]
	}
	return res, err
}

// A ban the datapath refuses is skipped and counted once; the others of
// the sync apply, the sync succeeds, and the refused one is tried again at
// the next syncs.
func TestFleetBansDatapathRefuses(t *testing.T) {
	r, ns := startRedis(t)
	log := &logLines{}
	img, p := xdpltest.CompilePolicy(t, fmt.Sprintf("fleet: {redis: 'redis://%s/0', namespace: refuse%d}\nrules: []\n",
		r.Addr(), time.Now().UnixNano()))
	l := xdpltest.LoadImage(t, maps.Options{Clock: maps.ClockKtime, MaxSources: 1 << 10}, img)
	bad := netip.MustParsePrefix("198.51.100.0/24")
	e, err := fleet.New(fleet.Options{Fleet: p.Fleet, Interface: "t", Logf: log.logf, Dialer: testutil.DialIn(ns)},
		refusingTable{l, map[netip.Prefix]bool{bad: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	rc := r.Client()
	defer rc.Close()
	end := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
	ctx := context.Background()
	if err := rc.HSet(ctx, "xdpl:"+p.Fleet.Namespace+":bans", "198.51.100.0/24", end+"|h1|", "203.0.113.0/24", end+"|h1|").Err(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if res := e.Sync(ctx); res.Err != nil {
			t.Fatalf("sync: %v", res.Err)
		}
	}
	bans, err := l.Bans()
	if err != nil || len(bans) != 1 || bans[0].Prefix != netip.MustParsePrefix("203.0.113.0/24") {
		t.Fatalf("bans %+v (%v), want 203.0.113.0/24 alone", bans, err)
	}
	if n := gathered(t, e.Metrics(), "xdplimit_bans_refused_total", "reason", "datapath"); n != 1 {
		t.Errorf("refused by the datapath: %v, want 1", n)
	}
	var lines []string
	for _, s := range log.all() {
		if strings.Contains(s, "(datapath:") {
			lines = append(lines, s)
		}
	}
	if want := "fleet: refused 198.51.100.0/24 (datapath: no space left on device)"; len(lines) != 1 || lines[0] != want {
		t.Errorf("logged %q, want %q once", lines, want)
	}
	// Still in the hash: another host's table may take it.
	if n, err := rc.HLen(ctx, "xdpl:"+p.Fleet.Namespace+":bans").Result(); err != nil || n != 2 {
		t.Errorf("hash holds %d entries (%v), want 2", n, err)
	}
}
