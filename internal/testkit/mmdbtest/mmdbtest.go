// SPDX-License-Identifier: Apache-2.0

// Package mmdbtest writes MaxMind DB files for tests with MaxMind's own
// writer (github.com/maxmind/mmdbwriter), in the layouts of
// GeoLite2-Country and GeoLite2-ASN, so that the geoip package, the policy
// and the end-to-end tests read databases built the way real ones are.
// Tests only use it.
package mmdbtest

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/maxmind/mmdbwriter"
	"github.com/maxmind/mmdbwriter/mmdbtype"
)

// Build is the build time written into every database.
var Build = time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)

// Tree is a database being written.
type Tree struct{ *mmdbwriter.Tree }

// New starts a database of type dbType ("GeoLite2-Country",
// "GeoLite2-ASN"); mod may change the writer's options.
func New(tb testing.TB, dbType string, mod func(*mmdbwriter.Options)) *Tree {
	tb.Helper()
	opts := options(dbType)
	if mod != nil {
		mod(&opts)
	}
	tree, err := mmdbwriter.New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	return &Tree{tree}
}

func options(dbType string) mmdbwriter.Options {
	return mmdbwriter.Options{DatabaseType: dbType, BuildEpoch: Build.Unix(),
		Description: map[string]string{"en": "xdplimit test " + dbType}, Languages: []string{"en"},
		// The tests use the documentation and benchmarking ranges, which
		// the writer otherwise refuses as reserved.
		IncludeReservedNetworks: true}
}

// Insert adds network p with its record.
func (t *Tree) Insert(tb testing.TB, p netip.Prefix, rec mmdbtype.Map) {
	tb.Helper()
	if err := insert(t.Tree, p, rec); err != nil {
		tb.Fatal(err)
	}
}

func insert(tree *mmdbwriter.Tree, p netip.Prefix, rec mmdbtype.Map) error {
	ipnet := &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
	if err := tree.Insert(ipnet, rec); err != nil {
		return fmt.Errorf("insert %v: %w", p, err)
	}
	return nil
}

// Write writes the database to path as geoipupdate does: into a temporary
// file of the same directory, renamed over path.
func (t *Tree) Write(tb testing.TB, path string) {
	tb.Helper()
	if err := write(t.Tree, path); err != nil {
		tb.Fatal(err)
	}
}

func write(tree *mmdbwriter.Tree, path string) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".mmdb-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := tree.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// Network is one network and its record.
type Network struct {
	Prefix string
	Record mmdbtype.Map
}

// Write writes a database of dbType holding networks to path.
func Write(tb testing.TB, path, dbType string, networks ...Network) {
	tb.Helper()
	t := New(tb, dbType, nil)
	for _, n := range networks {
		t.Insert(tb, netip.MustParsePrefix(n.Prefix), n.Record)
	}
	t.Write(tb, path)
}

func names(en string) mmdbtype.Map {
	return mmdbtype.Map{"en": mmdbtype.String(en), "de": mmdbtype.String(en + " (de)")}
}

// Country is a GeoLite2-Country record: continent, country and
// registered_country, each with geoname_id, iso_code and names. An empty
// code leaves the field out.
func Country(code, registered string) mmdbtype.Map {
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

// ASN is a GeoLite2-ASN record.
func ASN(n uint32, org string) mmdbtype.Map {
	return mmdbtype.Map{"autonomous_system_number": mmdbtype.Uint32(n), "autonomous_system_organization": mmdbtype.String(org)}
}
