// SPDX-License-Identifier: Apache-2.0

package banfeed

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/termsafe"
	"github.com/xdplimit/xdplimit/maps"
)

var defaults = Limits(maps.BanLimits{})

func TestLimitsDefaults(t *testing.T) {
	if want := (maps.BanLimits{MinPrefix4: 8, MinPrefix6: 32, MaxImported: 10000, MaxPerSync: 1000}); defaults != want {
		t.Fatalf("defaults %+v, want %+v", defaults, want)
	}
	set := maps.BanLimits{MinPrefix4: 0, Set: true}
	if Limits(set) != set {
		t.Fatal("recorded limits not kept")
	}
}

func TestCheck(t *testing.T) {
	p := netip.MustParsePrefix
	ok := func(prefix string, d time.Duration, reason string) Verdict {
		return Verdict{Ban: maps.BanRequest{Prefix: p(prefix), For: d, Reason: reason}}
	}
	for _, c := range []struct {
		name string
		o    Offer
		want Verdict
	}{
		{"a /24", Offer{Prefix: p("198.51.100.0/24"), Left: time.Hour, Origin: "h1 ssh", Reason: "scan"},
			ok("198.51.100.0/24", time.Hour, "fleet: h1 ssh: scan")},
		{"no reason", Offer{Prefix: p("2001:db8::/48"), Left: time.Hour, Origin: "h1 manual"},
			ok("2001:db8::/48", time.Hour, "fleet: h1 manual")},
		{"unmasked", Offer{Prefix: p("198.51.100.7/24"), Left: time.Hour, Origin: "o"},
			ok("198.51.100.0/24", time.Hour, "fleet: o")},
		{"mapped address", Offer{Prefix: p("::ffff:192.0.2.1/128"), Left: time.Hour, Origin: "o"},
			ok("192.0.2.1/32", time.Hour, "fleet: o")},
		{"the widest allowed", Offer{Prefix: p("10.0.0.0/8"), Left: time.Hour, Origin: "o"},
			ok("10.0.0.0/8", time.Hour, "fleet: o")},
		{"under a second", Offer{Prefix: p("192.0.2.1/32"), Left: time.Millisecond, Origin: "o"},
			ok("192.0.2.1/32", time.Second, "fleet: o")},
		{"within the skew", Offer{Prefix: p("192.0.2.1/32"), Left: maps.MaxBan + 30*time.Second, Origin: "o"},
			ok("192.0.2.1/32", maps.MaxBan, "fleet: o")},

		{"IPv4 world", Offer{Prefix: p("0.0.0.0/0"), Left: time.Hour},
			Verdict{Refused: TooWide, Why: "wider than /8: 0.0.0.0/0 covers every IPv4 address (4294967296 addresses)"}},
		{"IPv6 world", Offer{Prefix: p("::/0"), Left: time.Hour},
			Verdict{Refused: TooWide, Why: "wider than /32: ::/0 covers every IPv6 address (2^128 addresses)"}},
		{"IPv4-mapped world", Offer{Prefix: p("::ffff:0.0.0.0/96"), Left: time.Hour},
			Verdict{Refused: TooWide, Why: "wider than /8: 0.0.0.0/0 covers every IPv4 address (4294967296 addresses)"}},
		{"IPv4-mapped /7", Offer{Prefix: p("::ffff:10.0.0.0/103"), Left: time.Hour},
			Verdict{Refused: TooWide, Why: "wider than /8: 10.0.0.0/7 covers 33554432 IPv4 addresses, 10.0.0.0 to 11.255.255.255"}},
		{"unmasked world", Offer{Prefix: p("203.0.113.5/0"), Left: time.Hour},
			Verdict{Refused: TooWide, Why: "wider than /8: 0.0.0.0/0 covers every IPv4 address (4294967296 addresses)"}},
		{"IPv6 /31", Offer{Prefix: p("2001:db8::/31"), Left: time.Hour},
			Verdict{Refused: TooWide, Why: "wider than /32: 2001:db8::/31 covers 2^97 IPv6 addresses, 2001:db8:: to 2001:db9:ffff:ffff:ffff:ffff:ffff:ffff"}},
		{"ended", Offer{Prefix: p("192.0.2.1/32"), Left: 0}, Verdict{Refused: Expired, Why: "ended already"}},
		{"ended long ago", Offer{Prefix: p("192.0.2.1/32"), Left: -time.Hour}, Verdict{Refused: Expired, Why: "ended already"}},
		{"a year", Offer{Prefix: p("192.0.2.1/32"), Left: 365 * 24 * time.Hour},
			Verdict{Refused: TooLong, Why: "ends 365 days ahead, more than a ban lasts (30 days)"}},
		{"no prefix", Offer{Left: time.Hour}, Verdict{Refused: Malformed, Why: "not a prefix"}},
	} {
		if got := Check("fleet", c.o, defaults); got != c.want {
			t.Errorf("%s: %+v\nwant %+v", c.name, got, c.want)
		}
	}
	// Limits of 0 accept the whole family, knowingly.
	all := maps.BanLimits{Set: true}
	if v := Check("fleet", Offer{Prefix: p("::/0"), Left: time.Hour}, all); v.Refused != "" || v.Ban.Prefix != p("::/0") {
		t.Errorf("min_prefix 0: %+v", v)
	}
}

func TestReason(t *testing.T) {
	for _, c := range []struct {
		origin, reason, want string
		escaped              bool
	}{
		{"h1 ssh", "", "fleet: h1 ssh", false},
		{"h1 manual", "abuse desk", "fleet: h1 manual: abuse desk", false},
		{"h1 manual", "\x1b]0;owned\x07\x1b[2J", `fleet: h1 manual: \x1b]0;owned\x07\x1b[2J`, true},
		{"h\u202e1", "x", `fleet: h\u202e1: x`, true},
		{"h1", strings.Repeat("y", 100), "fleet: h1: " + strings.Repeat("y", maps.BanReasonLen-len("fleet: h1: ")), false},
		// Cut between escapes, never inside one.
		{"h1", strings.Repeat("y", 50) + "\x1b[2J", "fleet: h1: " + strings.Repeat("y", 50), true},
	} {
		got, esc := Reason("fleet", c.origin, c.reason)
		if got != c.want || esc != c.escaped {
			t.Errorf("Reason(%q, %q) = %q %v, want %q %v", c.origin, c.reason, got, esc, c.want, c.escaped)
		}
	}
	if !From(maps.Ban{Reason: "fleet: h1 ssh"}, "fleet") || From(maps.Ban{Reason: "fleet: h1", Shadow: true}, "fleet") ||
		From(maps.Ban{Reason: "fleetwide"}, "fleet") {
		t.Error("From")
	}
}

// A feed's ban, stored as a manual one, is named after its source; a
// rule's, a ban by hand and a shadow ban keep the table's origin.
func TestOrigin(t *testing.T) {
	crowdsec, _ := Reason(CrowdSec, "cscli/manual", "ban 42")
	fleet, _ := Reason(Fleet, "h1 ssh", "")
	for _, c := range []struct {
		b    maps.Ban
		want string
	}{
		{maps.Ban{Origin: maps.OriginManual, Reason: crowdsec}, CrowdSec},
		{maps.Ban{Origin: maps.OriginManual, Reason: fleet}, Fleet},
		{maps.Ban{Origin: maps.OriginManual, Reason: "abuse desk"}, maps.OriginManual},
		{maps.Ban{Origin: maps.OriginManual, Reason: "crowdsecurity"}, maps.OriginManual},
		{maps.Ban{Origin: "ssh", Reason: crowdsec}, "ssh"},
		{maps.Ban{Origin: maps.OriginManual, Reason: fleet, Shadow: true}, maps.OriginManual},
	} {
		if got := Origin(c.b); got != c.want {
			t.Errorf("Origin(%+v) = %q, want %q", c.b, got, c.want)
		}
	}
	for reason, want := range map[string]string{crowdsec: CrowdSec, fleet: Fleet, "fleetwide": "", "": "", "abuse: fleet: x": ""} {
		if got := FeedOf(reason); got != want {
			t.Errorf("FeedOf(%q) = %q, want %q", reason, got, want)
		}
	}
}

func TestCovers(t *testing.T) {
	for in, want := range map[string]string{
		"0.0.0.0/0":           "0.0.0.0/0 covers every IPv4 address (4294967296 addresses)",
		"::ffff:0.0.0.0/96":   "0.0.0.0/0 covers every IPv4 address (4294967296 addresses)",
		"128.0.0.0/1":         "128.0.0.0/1 covers 2147483648 IPv4 addresses, 128.0.0.0 to 255.255.255.255",
		"198.51.100.7/32":     "198.51.100.7/32 covers one IPv4 address",
		"2001:db8::/64":       "2001:db8::/64 covers 18446744073709551616 IPv6 addresses, 2001:db8:: to 2001:db8::ffff:ffff:ffff:ffff",
		"::/0":                "::/0 covers every IPv6 address (2^128 addresses)",
		"2000::/3":            "2000::/3 covers 2^125 IPv6 addresses, 2000:: to 3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
		"::ffff:10.0.0.0/104": "10.0.0.0/8 covers 16777216 IPv4 addresses, 10.0.0.0 to 10.255.255.255",
	} {
		if got := Covers(netip.MustParsePrefix(in)); got != want {
			t.Errorf("Covers(%s) = %q, want %q", in, got, want)
		}
	}
}

// FuzzSanitizeReason: whatever a source sends as origin and reason, the
// reason stored is printable, fits the table, passes CheckBan, and starts
// with the source (so the bans held from it are counted).
func FuzzSanitizeReason(f *testing.F) {
	for _, s := range [][2]string{
		{"h1 ssh", ""}, {"h1 manual", "\x1b]0;owned\x07\x1b[2J"}, {"\u202eh1", "\u2066x\u2069"},
		{"\xff\xfe", "\x9b2J"}, {strings.Repeat("é", 40), strings.Repeat("\x00", 70)}, {"a|b", "c|d"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, origin, reason string) {
		got, escaped := Reason("fleet", origin, reason)
		if len(got) > maps.BanReasonLen || !termsafe.Clean(got) || !strings.HasPrefix(got, "fleet: ") {
			t.Fatalf("Reason(%q, %q) = %q", origin, reason, got)
		}
		if escaped != (!termsafe.Clean(origin) || !termsafe.Clean(reason)) {
			t.Fatalf("escaped %v for %q, %q", escaped, origin, reason)
		}
		if err := maps.CheckBan(netip.MustParsePrefix("192.0.2.1/32"), time.Minute, got); err != nil {
			t.Fatalf("the table refuses %q: %v", got, err)
		}
	})
}
