// SPDX-License-Identifier: Apache-2.0

package geoip

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/maxmind/mmdbwriter"
)

func strs(ps []netip.Prefix) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}

func expectSet(t *testing.T, s Set, key string, v4, v6 []string) {
	t.Helper()
	if s.Key != key || !slices.Equal(strs(s.V4), v4) || !slices.Equal(strs(s.V6), v6) {
		t.Errorf("set %s: v4 %v v6 %v; want %s: v4 %v v6 %v", s.Key, s.V4, s.V6, key, v4, v6)
	}
	for _, p := range s.V4 {
		if !p.Addr().Is4() {
			t.Errorf("set %s: %v in V4 is not a 4-byte prefix", s.Key, p)
		}
	}
}

func countryDB(t *testing.T, mod func(*mmdbwriter.Options)) string {
	return writeDB(t, "GeoLite2-Country", mod,
		entry{"192.0.2.0/25", country("FR", "FR")},
		entry{"192.0.2.128/25", country("FR", "FR")},
		entry{"198.51.100.0/24", country("FR", "FR")},
		// Written on top with a different record: the walk yields the
		// /24 in pieces around it, which merge back.
		entry{"198.51.100.16/28", country("FR", "BE")},
		entry{"2001:db8:1::/48", country("DE", "DE")},
		entry{"2001:db8:2::/49", country("DE", "DE")},
		entry{"2001:db8:2:8000::/49", country("DE", "DE")},
		// Anycast: no country, a registered one.
		entry{"203.0.113.0/24", country("", "DE")},
		// Located in the US, registered in DE: it is the US's.
		entry{"2001:db8:3::/48", country("US", "DE")},
	)
}

func TestCountries(t *testing.T) {
	db := openDB(t, countryDB(t, nil))
	sets, err := db.Countries([]string{"fr", "DE", "US", "XX", "FR"})
	if err != nil {
		t.Fatal(err)
	}
	if len(sets) != 4 {
		t.Fatalf("%d sets: %+v", len(sets), sets)
	}
	expectSet(t, sets[0], "FR", []string{"192.0.2.0/24", "198.51.100.0/24"}, nil)
	expectSet(t, sets[1], "DE", []string{"203.0.113.0/24"}, []string{"2001:db8:1::/48", "2001:db8:2::/48"})
	expectSet(t, sets[2], "US", nil, []string{"2001:db8:3::/48"})
	if !sets[3].Empty() || sets[3].Key != "XX" || sets[0].Empty() {
		t.Errorf("XX: %+v", sets[3])
	}
	if got := sets[1].MemoryBytes(); got != EntryBytes4+2*EntryBytes6 {
		t.Errorf("DE memory %d", got)
	}
	if got := strs(sets[1].Prefixes()); !slices.Equal(got, []string{"203.0.113.0/24", "2001:db8:1::/48", "2001:db8:2::/48"}) {
		t.Errorf("Prefixes: %v", got)
	}

	_, err = db.Countries([]string{"FR", "FRA", "1A", "", "é"})
	if err == nil || !strings.Contains(err.Error(), `"FRA", "1A", "", "é"`) {
		t.Fatalf("bad codes: %v", err)
	}
}

// IPv4 networks written as IPv4-mapped IPv6 (a writer without aliasing)
// come back as IPv4; with aliasing (the default), IPv4 comes once, not
// once per alias (::ffff:0:0/96, 2002::/16).
func TestIPv4MappedAndAliases(t *testing.T) {
	path := writeDB(t, "GeoLite2-Country", func(o *mmdbwriter.Options) { o.DisableIPv4Aliasing = true },
		entry{"::ffff:192.0.2.0/120", country("FR", "")},
		entry{"198.51.100.0/24", country("FR", "")},
	)
	sets, err := openDB(t, path).Countries([]string{"FR"})
	if err != nil {
		t.Fatal(err)
	}
	expectSet(t, sets[0], "FR", []string{"192.0.2.0/24", "198.51.100.0/24"}, nil)

	sets, err = openDB(t, countryDB(t, nil)).Countries([]string{"FR"})
	if err != nil {
		t.Fatal(err)
	}
	expectSet(t, sets[0], "FR", []string{"192.0.2.0/24", "198.51.100.0/24"}, nil)
}

// A record on an IPv6 network that holds the IPv4 space holds every IPv4
// address: a lookup of one finds it.
func TestIPv6NetworkHoldingIPv4(t *testing.T) {
	path := writeDB(t, "GeoLite2-Country", func(o *mmdbwriter.Options) { o.DisableIPv4Aliasing = true },
		entry{"::/64", country("AQ", "")})
	sets, err := openDB(t, path).Countries([]string{"AQ"})
	if err != nil {
		t.Fatal(err)
	}
	expectSet(t, sets[0], "AQ", []string{"0.0.0.0/0"}, []string{"::/64"})
}

func TestIPv4OnlyDatabase(t *testing.T) {
	path := writeDB(t, "GeoLite2-Country", func(o *mmdbwriter.Options) { o.IPVersion = 4; o.RecordSize = 24 },
		entry{"192.0.2.0/24", country("FR", "")}, entry{"198.51.100.0/25", country("FR", "")})
	db := openDB(t, path)
	sets, err := db.Countries([]string{"FR"})
	if err != nil {
		t.Fatal(err)
	}
	expectSet(t, sets[0], "FR", []string{"192.0.2.0/24", "198.51.100.0/25"}, nil)
	if m := db.Metadata(); m.IPVersion != 4 {
		t.Errorf("%+v", m)
	}
}

func TestASNs(t *testing.T) {
	path := writeDB(t, "GeoLite2-ASN", nil,
		entry{"192.0.2.0/24", asn(64500, "Example Net")},
		entry{"2001:db8::/32", asn(64500, "Example Net")},
		entry{"198.51.100.0/24", asn(64501, "Other")},
		entry{"203.0.113.0/24", asn(4200000000, "Private 32-bit")},
	)
	db := openDB(t, path)
	sets, err := db.ASNs([]uint32{64500, 4200000000, 64999, 64500})
	if err != nil {
		t.Fatal(err)
	}
	if len(sets) != 3 {
		t.Fatalf("%+v", sets)
	}
	expectSet(t, sets[0], "AS64500", []string{"192.0.2.0/24"}, []string{"2001:db8::/32"})
	expectSet(t, sets[1], "AS4200000000", []string{"203.0.113.0/24"}, nil)
	if sets[0].Name != "Example Net" || !sets[2].Empty() || sets[2].Key != "AS64999" {
		t.Errorf("%+v", sets)
	}
	if _, err := db.ASNs([]uint32{0}); err == nil {
		t.Error("AS 0 accepted")
	}
	// The wrong kind of database is an error, not empty sets.
	if _, err := db.Countries([]string{"FR"}); err == nil || !strings.Contains(err.Error(), "no country data") {
		t.Errorf("countries from an ASN database: %v", err)
	}
	if _, err := openDB(t, countryDB(t, nil)).ASNs([]uint32{64500}); err == nil ||
		!strings.Contains(err.Error(), "no autonomous_system_number data") {
		t.Errorf("ASNs from a country database: %v", err)
	}
}

func TestMetadata(t *testing.T) {
	path := countryDB(t, nil)
	m := openDB(t, path).Metadata()
	st, _ := os.Stat(path)
	if m.Type != "GeoLite2-Country" || !m.BuildTime.Equal(testBuild) || m.IPVersion != 6 || m.NodeCount == 0 ||
		m.FileSize != st.Size() || m.Description != "xdplimit test GeoLite2-Country" {
		t.Errorf("%+v", m)
	}
	if err := openDB(t, path).Verify(); err != nil {
		t.Errorf("Verify: %v", err)
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.mmdb")
	os.WriteFile(garbage, []byte("not a database, not even close\n"), 0o644)
	empty := filepath.Join(dir, "empty.mmdb")
	os.WriteFile(empty, nil, 0o644)
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(dir, "missing.mmdb"), garbage, empty, dir, fifo} {
		if db, err := Open(p); err == nil {
			db.Close()
			t.Errorf("%s opened", p)
		} else {
			t.Logf("%s: %v", filepath.Base(p), err)
		}
	}
	// Truncated: the metadata, at the end, is gone.
	b, _ := os.ReadFile(countryDB(t, nil))
	cut := filepath.Join(dir, "cut.mmdb")
	os.WriteFile(cut, b[:len(b)/2], 0o644)
	if db, err := Open(cut); err == nil {
		db.Close()
		t.Error("truncated database opened")
	}
}

// A corrupt search tree whose nodes share children (node i's two records
// both point at node i+1) would yield 2^depth networks: refused once the
// walk passes what a tree of its size can hold.
func TestCorruptTreeIsBounded(t *testing.T) {
	tree := newTree(t, "GeoLite2-Country", func(o *mmdbwriter.Options) { o.IPVersion = 4; o.RecordSize = 24 })
	for i := range 64 {
		insert(t, tree, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i * 4), 0, 0}), 16), country("FR", ""))
	}
	path := writeTree(t, tree)
	db := openDB(t, path)
	nodes := int(db.Metadata().NodeCount)
	b, _ := os.ReadFile(path)
	rec := func(i, side int) []byte { return b[6*i+3*side : 6*i+3*side+3] }
	val := func(r []byte) int { return int(r[0])<<16 | int(r[1])<<8 | int(r[2]) }
	var data []byte // a record pointing at data
	for i := 0; i < nodes && data == nil; i++ {
		for side := range 2 {
			if val(rec(i, side)) > nodes {
				data = slices.Clone(rec(i, side))
				break
			}
		}
	}
	const depth = 24 // 2^24 networks, against a tree of ~100 nodes
	if data == nil || nodes <= depth {
		t.Fatalf("%d nodes, data record %v", nodes, data)
	}
	for i := range depth {
		next := []byte{byte((i + 1) >> 16), byte((i + 1) >> 8), byte(i + 1)}
		if i == depth-1 {
			next = data
		}
		copy(rec(i, 0), next)
		copy(rec(i, 1), next)
	}
	os.WriteFile(path, b, 0o644)
	_, err := openDB(t, path).Countries([]string{"FR"})
	if err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("shared subtrees: %v", err)
	}
	t.Log(err)
}
