// SPDX-License-Identifier: Apache-2.0

// Package geoip turns country codes and autonomous system numbers into
// prefix sets, from MaxMind DB files (GeoLite2-Country, GeoLite2-City,
// GeoLite2-ASN and the commercial and third-party databases of the same
// layouts), for the policy to match on.
//
// A set is computed in one pass over the database's networks, whatever
// the number of codes asked: linear in the networks, each record decoded
// once however many networks share it. IPv4 comes out as 4-byte prefixes,
// IPv4-mapped IPv6 included, as everywhere in xdplimit; each family's
// prefixes are sorted, with nested ones dropped and adjacent halves
// joined.
//
// Opening reads the file into memory and nothing else: no memory map
// (a database rewritten in place under a mapping crashes the process
// with SIGBUS), no background work. Reloading on change is the caller's.
package geoip

import (
	"fmt"
	"time"

	maxminddb "github.com/oschwald/maxminddb-golang/v2"

	"github.com/xdplimit/xdplimit/internal/fileutil"
)

// MaxFileSize bounds a database file. GeoLite2-City, the largest of the
// free ones, is under 100 MB.
const MaxFileSize = 1 << 30

// DB is an open database, held in memory. Its methods may be called
// concurrently; Close must come after all of them.
type DB struct {
	r    *maxminddb.Reader
	path string
	size int64
}

// Metadata describes a database, for policy check and logs.
type Metadata struct {
	Type        string    // database_type: GeoLite2-Country, GeoLite2-ASN, DBIP-Country-Lite, ...
	Description string    // the English description, when there is one
	BuildTime   time.Time // when it was built (the data's age)
	IPVersion   int       // 4: IPv4 only; 6: both
	NodeCount   uint      // search tree nodes: the networks are at most this many plus one
	FileSize    int64     // bytes
}

// Open reads a MaxMind DB file and checks its metadata.
func Open(path string) (*DB, error) {
	b, err := fileutil.ReadRegular(path, MaxFileSize)
	if err != nil {
		return nil, fmt.Errorf("geoip: %w", err)
	}
	r, err := maxminddb.OpenBytes(b)
	if err != nil {
		return nil, fmt.Errorf("geoip: %s: %w", path, err)
	}
	if v := r.Metadata.IPVersion; v != 4 && v != 6 {
		r.Close()
		return nil, fmt.Errorf("geoip: %s: ip_version %d in the metadata", path, v)
	}
	return &DB{r: r, path: path, size: int64(len(b))}, nil
}

// Close releases the database.
func (db *DB) Close() error { return db.r.Close() }

// Path is the file the database was read from.
func (db *DB) Path() string { return db.path }

// Metadata returns the database's metadata.
func (db *DB) Metadata() Metadata {
	m := db.r.Metadata
	return Metadata{Type: m.DatabaseType, Description: m.Description["en"], BuildTime: m.BuildTime().UTC(),
		IPVersion: int(m.IPVersion), NodeCount: m.NodeCount, FileSize: db.size}
}

// Verify checks the whole database: search tree, data section, metadata.
// It reads every record, so it takes about as long as computing every set;
// Open does not call it. Sets computed from a database that fails it may
// be wrong.
func (db *DB) Verify() error {
	if err := db.r.Verify(); err != nil {
		return fmt.Errorf("geoip: %s: %w", db.path, err)
	}
	return nil
}
