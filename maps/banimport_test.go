// SPDX-License-Identifier: Apache-2.0

package maps_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

// verdictOf runs one UDP packet from src at the injected time t0.
func verdictOf(t *testing.T, l *maps.Limiter, src string) uint32 {
	t.Helper()
	return xdpltest.Run(t, l, pktgen.UDP4(netip.MustParseAddr(src), netip.MustParseAddr("10.0.0.1"), 4000, 53, 10), t0)
}

// BanAll applies a batch with one read of the table: a request CheckBan
// refuses is skipped and the others applied; a prefix given twice keeps
// its slot; a full table replaces the bans ending first.
func TestBanAll(t *testing.T) {
	xdpltest.RequireBPF(t)
	l := loadWith(t, maps.Options{Clock: maps.ClockMap, MaxBans: maps.BanWays}, "rules: []\n")
	if err := l.SetClock(uint64(t0)); err != nil {
		t.Fatal(err)
	}
	p := netip.MustParsePrefix
	res, err := l.BanAll([]maps.BanRequest{
		{Prefix: p("198.51.100.0/24"), For: time.Minute, Reason: "first"},
		{Prefix: p("203.0.113.9/32"), For: time.Minute, Reason: "\x1b]0;owned\x07"},
		{Prefix: p("::ffff:192.0.2.55/128"), For: 2 * time.Minute, Reason: "mapped"},
		{Prefix: p("198.51.100.0/24"), For: 3 * time.Minute, Reason: "again"},
		{For: time.Minute},
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, wantErr := range []bool{false, true, false, false, true} {
		if (res[i].Err != nil) != wantErr || res[i].Replaced.IsValid() {
			t.Errorf("request %d: %+v, want an error %v and nothing replaced", i, res[i], wantErr)
		}
	}
	bans, err := l.Bans()
	if err != nil {
		t.Fatal(err)
	}
	got := map[netip.Prefix]string{}
	for _, b := range bans {
		got[b.Prefix] = b.Reason
	}
	want := map[netip.Prefix]string{p("198.51.100.0/24"): "again", p("192.0.2.55/32"): "mapped"}
	if len(got) != len(want) || got[p("198.51.100.0/24")] != "again" || got[p("192.0.2.55/32")] != "mapped" {
		t.Fatalf("bans %v, want %v", got, want)
	}
	if m, err := l.Meta(); err != nil || m.ManualBans != 3 {
		t.Fatalf("manual bans counted %d (%v), want 3", m.ManualBans, err)
	}
	if err := l.EnableBanLookup(); err != nil {
		t.Fatal(err)
	}
	for src, want := range map[string]uint32{"198.51.100.4": xdpDrop, "192.0.2.55": xdpDrop, "203.0.113.9": xdpPass} {
		if v := verdictOf(t, l, src); v != want {
			t.Errorf("%s: verdict %d, want %d", src, v, want)
		}
	}

	// Fill the table: the two bans in force are replaced, the one ending
	// first (192.0.2.55, 2m) before the other (3m).
	var reqs []maps.BanRequest
	for i := range int(maps.BanWays) {
		reqs = append(reqs, maps.BanRequest{Prefix: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 1, 0, byte(i)}), 32),
			For: time.Hour})
	}
	res, err = l.BanAll(reqs)
	if err != nil {
		t.Fatal(err)
	}
	var replaced []netip.Prefix
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		if r.Replaced.IsValid() {
			replaced = append(replaced, r.Replaced)
		}
	}
	if len(replaced) != 2 || replaced[0] != p("192.0.2.55/32") || replaced[1] != p("198.51.100.0/24") {
		t.Fatalf("replaced %v, want 192.0.2.55/32 then 198.51.100.0/24", replaced)
	}
	if bans, err = l.Bans(); err != nil || len(bans) != int(maps.BanWays) {
		t.Fatalf("%d bans in force (%v), want %d", len(bans), err, maps.BanWays)
	}
	if v := verdictOf(t, l, "198.51.100.4"); v != xdpPass {
		t.Errorf("replaced ban still enforced: verdict %d", v)
	}
}

// Apply records the policy's bans: section in the metadata, where the CLI
// and the feeds read it; before any policy nothing is recorded.
func TestBanLimitsRecorded(t *testing.T) {
	xdpltest.RequireBPF(t)
	l := load(t, maps.ClockMap, "bans: {min_prefix: {ipv4: 16, ipv6: 0}, max_imported: 7, max_per_sync: 3}\nrules: []\n")
	got, err := l.BanLimits()
	want := maps.BanLimits{MinPrefix4: 16, MinPrefix6: 0, MaxImported: 7, MaxPerSync: 3, Set: true}
	if err != nil || got != want {
		t.Fatalf("limits %+v (%v), want %+v", got, err, want)
	}
	// A reload without the section brings the defaults back.
	if err := l.Apply(xdpltest.Compile(t, "rules: []\n")); err != nil {
		t.Fatal(err)
	}
	if got, err = l.BanLimits(); err != nil {
		t.Fatal(err)
	}
	if want := (maps.BanLimits{MinPrefix4: 8, MinPrefix6: 32, MaxImported: 10000, MaxPerSync: 1000, Set: true}); got != want {
		t.Fatalf("after a reload: %+v, want %+v", got, want)
	}

	fresh, err := maps.Load(maps.Options{Clock: maps.ClockMap, MaxSources: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if got, err := fresh.BanLimits(); err != nil || got.Set {
		t.Fatalf("no policy applied: %+v (%v), want nothing recorded", got, err)
	}
}

// UnbanAll ends many bans with one read of the table: each prefix as it is
// written (an IPv4-mapped one as IPv4), saying which were banned; the
// others stay, and the datapath lets their ends' sources pass again.
func TestUnbanAll(t *testing.T) {
	xdpltest.RequireBPF(t)
	l := loadWith(t, maps.Options{Clock: maps.ClockMap}, "rules: []\n")
	if err := l.SetClock(uint64(t0)); err != nil {
		t.Fatal(err)
	}
	p := netip.MustParsePrefix
	var reqs []maps.BanRequest
	for _, s := range []string{"198.51.100.1/32", "198.51.100.2/32", "203.0.113.0/24"} {
		reqs = append(reqs, maps.BanRequest{Prefix: p(s), For: time.Minute, Reason: "r"})
	}
	if _, err := l.BanAll(reqs); err != nil {
		t.Fatal(err)
	}
	if err := l.EnableBanLookup(); err != nil {
		t.Fatal(err)
	}
	ended, err := l.UnbanAll([]netip.Prefix{p("::ffff:198.51.100.1/128"), p("192.0.2.0/24"), p("203.0.113.0/24")})
	if err != nil || len(ended) != 3 || !ended[0] || ended[1] || !ended[2] {
		t.Fatalf("ended %v (%v), want [true false true]", ended, err)
	}
	bans, err := l.Bans()
	if err != nil || len(bans) != 1 || bans[0].Prefix != p("198.51.100.2/32") {
		t.Fatalf("bans %+v (%v), want 198.51.100.2/32 only", bans, err)
	}
	for src, want := range map[string]uint32{"198.51.100.1": xdpPass, "198.51.100.2": xdpDrop, "203.0.113.7": xdpPass} {
		if got := verdictOf(t, l, src); got != want {
			t.Errorf("%s: verdict %d, want %d", src, got, want)
		}
	}
}
