// SPDX-License-Identifier: Apache-2.0

package fleet

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/banfeed"
	"github.com/xdplimit/xdplimit/maps"
)

const decodeNowMs = int64(1_800_000_000_000)

var decodeLimits = banfeed.Limits(maps.BanLimits{})

func TestDecodeBan(t *testing.T) {
	in := func(d time.Duration) string { return strconv.FormatInt(decodeNowMs+d.Milliseconds(), 10) }
	for _, c := range []struct {
		field, value string
		refused      banfeed.Kind
		prefix       string
		reason       string
	}{
		{"198.51.100.0/24", in(time.Hour) + "|h1 ssh|", "", "198.51.100.0/24", "fleet: h1 ssh"},
		{"2001:db8::/48", in(time.Hour) + "|h1 manual|abuse|desk", "", "2001:db8::/48", "fleet: h1 manual: abuse|desk"},
		{"::ffff:192.0.2.1/128", in(time.Hour) + "|h1 manual|", "", "192.0.2.1/32", "fleet: h1 manual"},
		{"198.51.100.9/32", in(time.Hour) + "|h1 manual|\x1b]0;owned\x07\x1b[2J", "", "198.51.100.9/32",
			`fleet: h1 manual: \x1b]0;owned\x07\x1b[2J`},

		{"0.0.0.0/0", in(time.Hour) + "|evil|", banfeed.TooWide, "", ""},
		{"::/0", in(time.Hour) + "|evil|", banfeed.TooWide, "", ""},
		{"::ffff:0.0.0.0/96", in(time.Hour) + "|evil|", banfeed.TooWide, "", ""},
		{"8.0.0.0/7", in(time.Hour) + "|evil|", banfeed.TooWide, "", ""},
		{"not a prefix", in(time.Hour) + "|evil|", banfeed.Malformed, "", ""},
		{"198.51.100.0/24", "soon|evil|", banfeed.Malformed, "", ""},
		{"198.51.100.0/24", "-5|evil|", banfeed.Malformed, "", ""},
		{"198.51.100.0/24", in(time.Hour), banfeed.Malformed, "", ""},
		{"198.51.100.0/24", in(-time.Second) + "|h1|", banfeed.Expired, "", ""},
		{"198.51.100.0/24", "1|h1|", banfeed.Expired, "", ""},
		{"198.51.100.0/24", in(400*24*time.Hour) + "|evil|", banfeed.TooLong, "", ""},
		{"198.51.100.0/24", "9223372036854775807|evil|", banfeed.TooLong, "", ""},
	} {
		r, v := decodeBan(c.field, c.value, decodeNowMs, decodeLimits)
		if v.Refused != c.refused {
			t.Errorf("%q = %q: refused %q (%s), want %q", c.field, c.value, v.Refused, v.Why, c.refused)
			continue
		}
		if c.refused == "" && (r.req.Prefix != netip.MustParsePrefix(c.prefix) || r.req.Reason != c.reason || r.field != c.field) {
			t.Errorf("%q = %q: %+v, want %s %q", c.field, c.value, r, c.prefix, c.reason)
		}
	}
}

// FuzzParseFleetBan: whatever an entry of the hash holds, decoding never
// panics, and what it lets through is a ban the table takes (CheckBan), as
// narrow as the limits say, for at most maps.MaxBan, with a printable
// reason marked as the fleet's.
func FuzzParseFleetBan(f *testing.F) {
	for _, s := range [][2]string{
		{"198.51.100.0/24", "1800000060000|h1 ssh|"},
		{"0.0.0.0/0", "1800000060000|evil|"},
		{"::/0", "1800000060000|evil|"},
		{"::ffff:0.0.0.0/96", "1800000060000|evil|"},
		{"::ffff:10.1.2.3/120", "1800000060000|h|r"},
		{"198.51.100.9/32", "1800000060000|h1 manual|\x1b]0;owned\x07\x1b[2J"},
		{"2001:db8::/32", "1800000060000|\u202eh1|\xff"},
		{"bogus", "x|y|z"},
		{"198.51.100.0/24", "-1||"},
		{"198.51.100.0/24", "99999999999999999|far|future"},
		{"198.51.100.0/24", "1||"},
		{"fe80::1%eth0/64", "1800000060000|h|"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, field, value string) {
		r, v := decodeBan(field, value, decodeNowMs, decodeLimits)
		if v.Refused != "" {
			if !slices.Contains(banfeed.Kinds, v.Refused) || v.Why == "" {
				t.Fatalf("%q = %q: verdict %+v", field, value, v)
			}
			return
		}
		p := r.req.Prefix
		if p != maps.CanonicalBanPrefix(p) || p.Bits() < banfeed.MinBits(p, decodeLimits) {
			t.Fatalf("%q = %q: let %s through", field, value, p)
		}
		if err := maps.CheckBan(p, r.req.For, r.req.Reason); err != nil {
			t.Fatalf("%q = %q: the table refuses %+v: %v", field, value, r.req, err)
		}
		if !strings.HasPrefix(r.req.Reason, "fleet: ") || r.expiresMs <= decodeNowMs {
			t.Fatalf("%q = %q: %+v", field, value, r)
		}
		// What a host writes reads back the same.
		if !strings.Contains(r.origin, "|") {
			if b, ok := parseFleetBan(r.fleetBan.String()); !ok || b != r.fleetBan {
				t.Fatalf("%+v does not read back: %+v", r.fleetBan, b)
			}
		}
	})
}
