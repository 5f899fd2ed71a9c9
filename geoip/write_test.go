// SPDX-License-Identifier: Apache-2.0

package geoip

// Databases written for the tests with MaxMind's own writer
// (internal/testkit/mmdbtest), in the layouts of GeoLite2-Country and GeoLite2-ASN.

import (
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/maxmind/mmdbwriter"
	"github.com/maxmind/mmdbwriter/mmdbtype"

	"github.com/xdplimit/xdplimit/internal/testkit/mmdbtest"
)

var testBuild = mmdbtest.Build

// entry is one network and its record.
type entry struct {
	network string
	record  mmdbtype.Map
}

var (
	country = mmdbtest.Country
	asn     = mmdbtest.ASN
)

func newTree(t testing.TB, dbType string, mod func(*mmdbwriter.Options)) *mmdbtest.Tree {
	return mmdbtest.New(t, dbType, mod)
}

func insert(t testing.TB, tree *mmdbtest.Tree, p netip.Prefix, rec mmdbtype.Map) {
	t.Helper()
	tree.Insert(t, p, rec)
}

func writeTree(t testing.TB, tree *mmdbtest.Tree) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "test.mmdb")
	tree.Write(t, path)
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
