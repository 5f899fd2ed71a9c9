package geoip

// Databases written for the tests with MaxMind's own writer, in the
// layouts of GeoLite2-Country and GeoLite2-ASN.

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/maxmind/mmdbwriter"
	"github.com/maxmind/mmdbwriter/mmdbtype"
)

var testBuild = time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)

// entry is one network and its record.
type entry struct {
	network string
	record  mmdbtype.Map
}

func newTree(t testing.TB, dbType string, mod func(*mmdbwriter.Options)) *mmdbwriter.Tree {
	t.Helper()
	opts := mmdbwriter.Options{DatabaseType: dbType, BuildEpoch: testBuild.Unix(),
		Description: map[string]string{"en": "xdplimit test " + dbType}, Languages: []string{"en"},
		// The tests use the documentation ranges, which the writer
		// otherwise refuses as reserved.
		IncludeReservedNetworks: true}
	if mod != nil {
		mod(&opts)
	}
	tree, err := mmdbwriter.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

func insert(t testing.TB, tree *mmdbwriter.Tree, p netip.Prefix, rec mmdbtype.Map) {
	t.Helper()
	ipnet := &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
	if err := tree.Insert(ipnet, rec); err != nil {
		t.Fatalf("insert %v: %v", p, err)
	}
}

func writeTree(t testing.TB, tree *mmdbwriter.Tree) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "test.mmdb")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tree.WriteTo(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func writeDB(t testing.TB, dbType string, mod func(*mmdbwriter.Options), entries ...entry) string {
	t.Helper()
	tree := newTree(t, dbType, mod)
	for _, e := range entries {
		insert(t, tree, netip.MustParsePrefix(e.network), e.record)
	}
	return writeTree(t, tree)
}

func openDB(t testing.TB, path string) *DB {
	t.Helper()
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func names(en string) mmdbtype.Map {
	return mmdbtype.Map{"en": mmdbtype.String(en), "de": mmdbtype.String(en + " (de)")}
}

// country is a GeoLite2-Country record: continent, country and
// registered_country, each with geoname_id, iso_code and names. An empty
// code leaves the field out.
func country(code, registered string) mmdbtype.Map {
	part := func(c string) mmdbtype.Map {
		return mmdbtype.Map{"geoname_id": mmdbtype.Uint32(len(c) * 1000), "iso_code": mmdbtype.String(c), "names": names("Land " + c)}
	}
	rec := mmdbtype.Map{"continent": mmdbtype.Map{"code": mmdbtype.String("EU"), "geoname_id": mmdbtype.Uint32(6255148),
		"names": names("Europe")}}
	if code != "" {
		rec["country"] = part(code)
	}
	if registered != "" {
		rec["registered_country"] = part(registered)
	}
	return rec
}

// asn is a GeoLite2-ASN record.
func asn(n uint32, org string) mmdbtype.Map {
	return mmdbtype.Map{"autonomous_system_number": mmdbtype.Uint32(n), "autonomous_system_organization": mmdbtype.String(org)}
}
