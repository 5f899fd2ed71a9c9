// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/xdplimit/xdplimit/internal/testkit/mmdbtest"
)

// geoDBs writes a country and an ASN database into a directory of the
// test's own and returns their paths.
func geoDBs(t *testing.T) (country, asn string) {
	t.Helper()
	dir := t.TempDir()
	country, asn = filepath.Join(dir, "country.mmdb"), filepath.Join(dir, "asn.mmdb")
	mmdbtest.Write(t, country, "GeoLite2-Country",
		mmdbtest.Network{Prefix: "192.0.2.0/24", Record: mmdbtest.Country("DE", "DE")},
		mmdbtest.Network{Prefix: "198.51.100.0/24", Record: mmdbtest.Country("DE", "DE")},
		mmdbtest.Network{Prefix: "2001:db8:1::/48", Record: mmdbtest.Country("DE", "DE")},
		mmdbtest.Network{Prefix: "203.0.113.0/24", Record: mmdbtest.Country("FR", "FR")},
		mmdbtest.Network{Prefix: "2001:db8:2::/48", Record: mmdbtest.Country("FR", "FR")})
	mmdbtest.Write(t, asn, "GeoLite2-ASN",
		mmdbtest.Network{Prefix: "198.51.100.0/25", Record: mmdbtest.ASN(64496, "Example One")},
		mmdbtest.Network{Prefix: "203.0.113.0/24", Record: mmdbtest.ASN(64496, "Example One")},
		mmdbtest.Network{Prefix: "2001:db8:1:8000::/49", Record: mmdbtest.ASN(64497, "Example Two")})
	return country, asn
}

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func mustParse(t *testing.T, src string) *Policy {
	t.Helper()
	p, err := Parse(filepath.Join(t.TempDir(), "p.yaml"), []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A rule's countries and ASNs each admit the union of their sets, the two
// together and src_cidrs what all of them admit; allow and deny take the
// union of theirs.
func TestGeoResolved(t *testing.T) {
	country, asn := geoDBs(t)
	p := mustParse(t, fmt.Sprintf(`geoip: {country_db: %s, asn_db: %s}
rules:
  - name: de-in-cidrs
    match: {src_countries: [DE], src_cidrs: [192.0.0.0/8, "2001:db8::/32"]}
    limit: {algorithm: token_bucket, rate: 10/s, burst: 10}
  - name: de
    match: {src_countries: [de]}
    limit: {algorithm: token_bucket, rate: 10/s, burst: 10}
  - name: de-or-fr-in-as
    match: {src_countries: [FR, DE, fr], src_asns: [AS64496, 64497]}
    limit: {algorithm: token_bucket, rate: 10/s, burst: 10}
  - name: plain
    match: {src_cidrs: [10.0.0.0/8]}
    limit: {algorithm: token_bucket, rate: 10/s, burst: 10}
deny: {cidrs: [192.0.2.1/32], countries: [FR], asns: [64497]}
`, country, asn))
	for i, c := range []struct {
		countries []string
		asns      []uint32
		src       []netip.Prefix
	}{
		{[]string{"DE"}, nil, prefixes("192.0.2.0/24", "2001:db8:1::/48")},
		{[]string{"DE"}, nil, prefixes("192.0.2.0/24", "198.51.100.0/24", "2001:db8:1::/48")},
		{[]string{"DE", "FR"}, []uint32{64496, 64497}, prefixes("198.51.100.0/25", "203.0.113.0/24", "2001:db8:1:8000::/49")},
	} {
		m := p.Rules[i].Match
		src, constrained := m.Sources()
		if !slices.Equal(m.SrcCountries, c.countries) || !slices.Equal(m.SrcASNs, c.asns) || !constrained || !slices.Equal(src, c.src) {
			t.Errorf("rule %s: countries %v, ASNs %v, sources %v (%v); want %v %v %v", p.Rules[i].Name, m.SrcCountries,
				m.SrcASNs, src, constrained, c.countries, c.asns, c.src)
		}
	}
	if src, constrained := p.Rules[3].Match.Sources(); !constrained || !slices.Equal(src, prefixes("10.0.0.0/8")) {
		t.Errorf("plain rule: %v %v", src, constrained)
	}
	if want := prefixes("192.0.2.1/32", "203.0.113.0/24", "2001:db8:1:8000::/49", "2001:db8:2::/48"); !slices.Equal(p.Deny, want) {
		t.Errorf("deny %v, want %v", p.Deny, want)
	}
	if !slices.Equal(p.ListFiles, []string{country, asn}) {
		t.Errorf("ListFiles %v, want the databases", p.ListFiles)
	}
	var b strings.Builder
	p.Describe(&b)
	for _, want := range []string{
		"geoip: countries from " + country + " (GeoLite2-Country, built 2026-11-20); ASNs from " + asn + " (GeoLite2-ASN, built 2026-11-20);\n",
		"  DE: 2 IPv4 and 1 IPv6 prefixes\n",
		"  AS64497 (Example Two): 0 IPv4 and 1 IPv6 prefix\n",
		"  rule de: 2 IPv4 and 1 IPv6 prefixes, about 544 B of kernel memory\n",
		"  deny: 1 IPv4 and 2 IPv6 prefixes, about 512 B of kernel memory\n",
		"2. de (line 6): src_countries [DE]\n",
		"3. de-or-fr-in-as (line 9): src_countries [DE, FR], src_asns [64496, 64497]\n",
		"deny: 4 prefixes, always dropped\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("describe:\n%s\nwant %q", b.String(), want)
		}
	}
	// The list files a watcher watches: the databases too, also when the
	// policy does not load.
	named := NamedListFiles(p.Path, []byte(fmt.Sprintf("geoip: {country_db: %s, asn_db: %s}\nrules: 5\n", country, asn)))
	if !slices.Equal(named, []string{country, asn}) {
		t.Errorf("NamedListFiles %v", named)
	}
}

// What a database does not hold matches nothing, with a warning; a prefix
// the databases put in both lists is allowed.
func TestGeoWarnings(t *testing.T) {
	country, asn := geoDBs(t)
	p := mustParse(t, fmt.Sprintf(`geoip: {country_db: %s, asn_db: %s}
rules:
  - name: nowhere
    match: {src_countries: [ZZ]}
    limit: {algorithm: token_bucket, rate: 10/s, burst: 10}
  - name: disjoint
    match: {src_countries: [DE], src_asns: [64496], src_cidrs: [10.0.0.0/8]}
    limit: {algorithm: token_bucket, rate: 10/s, burst: 10}
allow: {countries: [FR]}
deny: {asns: [64496]}
`, country, asn))
	var warns []string
	for _, w := range p.Warnings {
		warns = append(warns, w.Msg)
	}
	for _, want := range []string{
		"ZZ: no network of the database is in it, so it matches nothing",
		"rule nowhere never matches: its countries and ASNs (and src_cidrs) hold no network in common",
		"rule disjoint never matches: its countries and ASNs (and src_cidrs) hold no network in common",
		"1 prefixes (203.0.113.0/24 first) are both allowed and denied by the countries and ASNs of the lists: allowed",
	} {
		if !slices.Contains(warns, want) {
			t.Errorf("warnings %q, want %q", warns, want)
		}
	}
	if src, constrained := p.Rules[0].Match.Sources(); !constrained || len(src) != 0 {
		t.Errorf("rule nowhere: %v %v; want constrained to nothing", src, constrained)
	}
	if !slices.Equal(p.Deny, prefixes("198.51.100.0/25")) {
		t.Errorf("deny %v", p.Deny)
	}
}

// A database of the wrong kind, or not a database, is an error at the
// field that names it.
func TestGeoBadDatabase(t *testing.T) {
	country, asn := geoDBs(t)
	for _, c := range []struct{ src, want string }{
		{fmt.Sprintf("geoip: {country_db: %s}\ndeny: {countries: [DE]}\nrules: []\n", asn),
			"1:21: geoip.country_db: geoip: " + asn + " (GeoLite2-ASN) has no country data"},
		{fmt.Sprintf("geoip: {asn_db: %s}\ndeny: {asns: [1]}\nrules: []\n", country),
			"1:17: geoip.asn_db: geoip: " + country + " (GeoLite2-Country) has no autonomous_system_number data"},
		{fmt.Sprintf("geoip: {asn_db: %s/p.yaml}\ndeny: {asns: [1]}\nrules: []\n", filepath.Dir(country)),
			"geoip.asn_db: geoip: open " + filepath.Dir(country) + "/p.yaml: no such file or directory"},
	} {
		_, err := Parse("p.yaml", []byte(c.src))
		if got := errorLines(err); len(got) != 1 || !strings.Contains(got[0], c.want) {
			t.Errorf("%s: errors %q, want %q", c.src, got, c.want)
		}
	}
}

func TestGeoSyntax(t *testing.T) {
	runParseCases(t, []parseCase{
		{name: "no database", src: withMatch("src_countries: [DE]"), errs: []string{
			`p.yaml:3:13: rules[0].match: countries need a database: add geoip: {country_db: FILE} (docs/geoip.md)`}},
		{name: "no asn database", src: "geoip: {country_db: c.mmdb}\ndeny: {asns: [64496]}\nrules: []\n", errs: []string{
			`p.yaml:2:8: deny: ASNs need a database: add geoip: {asn_db: FILE} (docs/geoip.md)`}},
		{name: "missing database", src: "geoip: {country_db: missing.mmdb}\ndeny: {countries: [DE]}\nrules: []\n", errs: []string{
			`p.yaml:1:21: geoip.country_db: geoip: open missing.mmdb: no such file or directory`}},
		{name: "empty section", src: "geoip: {}\nrules: []\n", errs: []string{
			`p.yaml:1:8: geoip: give country_db, asn_db or both: MaxMind DB files (docs/geoip.md)`}},
		{name: "bad codes", src: withMatch(`src_countries: [DEU, "1A", FR], src_asns: [0, AS, x64496, 4294967296]`), errs: []string{
			`p.yaml:3:29: rules[0].match.src_countries[0]: "DEU" is not an ISO 3166-1 alpha-2 country code: two letters, like DE`,
			`p.yaml:3:34: rules[0].match.src_countries[1]: "1A" is not an ISO 3166-1 alpha-2 country code: two letters, like DE`,
			`p.yaml:3:56: rules[0].match.src_asns[0]: "0" is not an AS number: 1 to 4294967295, as 64496 or AS64496 (AS 0 names no network)`,
			`p.yaml:3:59: rules[0].match.src_asns[1]: "AS" is not an AS number: 1 to 4294967295, as 64496 or AS64496 (AS 0 names no network)`,
			`p.yaml:3:63: rules[0].match.src_asns[2]: "x64496" is not an AS number: 1 to 4294967295, as 64496 or AS64496 (AS 0 names no network)`,
			`p.yaml:3:71: rules[0].match.src_asns[3]: "4294967296" is not an AS number: 1 to 4294967295, as 64496 or AS64496 (AS 0 names no network)`}},
		{name: "countries in a list of CIDRs", src: "deny: [country:DE]\nrules: []\n", errs: []string{
			`p.yaml:1:8: deny[0]: "country:DE" is not an IP address or CIDR (like 192.0.2.0/24 or 2001:db8::/32)`}},
		{name: "unknown field", src: "geoip: {city_db: x}\nrules: []\n", errs: []string{
			`p.yaml:1:8: geoip: give country_db, asn_db or both: MaxMind DB files (docs/geoip.md)`,
			`p.yaml:1:9: geoip: unknown field "city_db"; allowed: country_db, asn_db`}},
	})
}
