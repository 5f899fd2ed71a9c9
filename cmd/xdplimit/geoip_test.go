// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xdplimit/xdplimit/internal/testkit/mmdbtest"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/pktgen"
)

// TestPolicyTestGeoIP: a capture replayed through a policy that names
// countries and an AS, from databases written with MaxMind's writer: each
// source is judged by the rule or list its country or AS puts it in, IPv4
// and IPv6, and sources in neither pass unmatched.
func TestPolicyTestGeoIP(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	country, asn := filepath.Join(dir, "country.mmdb"), filepath.Join(dir, "asn.mmdb")
	mmdbtest.Write(t, country, "GeoLite2-Country",
		mmdbtest.Network{Prefix: "192.0.2.0/24", Record: mmdbtest.Country("DE", "DE")},
		mmdbtest.Network{Prefix: "2001:db8:1::/48", Record: mmdbtest.Country("DE", "DE")},
		mmdbtest.Network{Prefix: "198.51.100.0/24", Record: mmdbtest.Country("CN", "CN")},
		mmdbtest.Network{Prefix: "2001:db8:2::/48", Record: mmdbtest.Country("CN", "CN")},
		mmdbtest.Network{Prefix: "203.0.113.0/24", Record: mmdbtest.Country("FR", "FR")})
	mmdbtest.Write(t, asn, "GeoLite2-ASN",
		mmdbtest.Network{Prefix: "203.0.113.0/25", Record: mmdbtest.ASN(64496, "Example")})
	pol := writeFile(t, "p.yaml", fmt.Sprintf(`geoip: {country_db: %s, asn_db: %s}
deny: {countries: [CN]}
rules:
  - name: de
    match: {src_countries: [DE]}
    limit: {algorithm: token_bucket, rate: 1/s, burst: 2}
  - name: as
    match: {src_asns: [64496]}
    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}
`, country, asn))

	dst4, dst6 := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("2001:db8:ff::1")
	// Four frames from each source, one source after the other: 1-4 DE,
	// 5-8 DE (IPv6), 9-12 CN, 13-16 CN (IPv6), 17-20 AS64496 (FR), 21-24
	// FR outside the AS, 25-28 nowhere.
	var frames [][]byte
	for _, src := range []string{"192.0.2.9", "2001:db8:1::9", "198.51.100.9", "2001:db8:2::9", "203.0.113.9",
		"203.0.113.200", "10.9.9.9"} {
		a := netip.MustParseAddr(src)
		for range 4 {
			if a.Is4() {
				frames = append(frames, pktgen.UDP4(a, dst4, 4000, 53, 18))
			} else {
				frames = append(frames, pktgen.UDP6(a, dst6, 4000, 53, 18))
			}
		}
	}
	capture := writeCapture(t, frames)
	out, errOut, code := runCLI("policy", "test", pol, "--pcap", capture, "--max-sources", "4096",
		"--explain", "1,3,5,9,13,17,18,21,25")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	for _, want := range []string{
		"frame 1 at +0.000000000s, 60 bytes, udp 192.0.2.9:4000 > 10.0.0.1:53\n  rule de (#1, line 4), key src_ip 192.0.2.9/32: pass",
		"frame 3 at +0.002000000s, 60 bytes, udp 192.0.2.9:4000 > 10.0.0.1:53\n  rule de (#1, line 4), level 0 (own limit: token_bucket 1 pkt/s burst 2), key src_ip 192.0.2.9/32: drop",
		"frame 5 at +0.004000000s, 80 bytes, udp [2001:db8:1::9]:4000 > [2001:db8:ff::1]:53\n  rule de (#1, line 4), key src_ip 2001:db8:1::/64: pass",
		"frame 9 at +0.008000000s, 60 bytes, udp 198.51.100.9:4000 > 10.0.0.1:53\n  deny list entry 198.51.100.0/24: drop",
		"frame 13 at +0.012000000s, 80 bytes, udp [2001:db8:2::9]:4000 > [2001:db8:ff::1]:53\n  deny list entry 2001:db8:2::/48: drop",
		"frame 17 at +0.016000000s, 60 bytes, udp 203.0.113.9:4000 > 10.0.0.1:53\n  rule as (#2, line 7), key src_ip 203.0.113.9/32: pass",
		"frame 18 at +0.017000000s, 60 bytes, udp 203.0.113.9:4000 > 10.0.0.1:53\n  rule as (#2, line 7), level 0 (own limit: token_bucket 1 pkt/s burst 1), key src_ip 203.0.113.9/32: drop",
		"frame 21 at +0.020000000s, 60 bytes, udp 203.0.113.200:4000 > 10.0.0.1:53\n  no rule matches: pass",
		"frame 25 at +0.024000000s, 60 bytes, udp 10.9.9.9:4000 > 10.0.0.1:53\n  no rule matches: pass",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// In all: de passes 2+2 and drops 2+2, as 1 and 3, the deny list
	// drops 8, and 8 pass unmatched.
	for _, row := range [][]string{{"de", "4", "280", "4", "280"}, {"as", "1", "60", "3", "180"},
		{"deny list", "8", "560", "drop"}, {"unmatched", "8", "480", "pass"}} {
		if !hasRow(out, row) {
			t.Errorf("output lacks a row %q:\n%s", row, out)
		}
	}
}

// hasRow says whether a line of out holds exactly the fields of row, in
// order (a table row, whatever its padding).
func hasRow(out string, row []string) bool {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if strings.Join(f[:min(len(f), len(row)+strings.Count(row[0], " "))], " ") == strings.Join(row, " ") {
			return true
		}
	}
	return false
}
