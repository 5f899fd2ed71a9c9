// SPDX-License-Identifier: Apache-2.0

package geoip

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	maxminddb "github.com/oschwald/maxminddb-golang/v2"
)

// Set is the networks of one country or one autonomous system.
type Set struct {
	// Key is the ISO 3166-1 alpha-2 code ("FR") or "AS" and the number
	// ("AS13335").
	Key string
	// Name is an autonomous system's organization as the database names
	// it (the first network's), empty for countries.
	Name string
	// V4 and V6 are the networks, per family, sorted and merged.
	V4, V6 []netip.Prefix
}

// Len is the number of prefixes, both families.
func (s Set) Len() int { return len(s.V4) + len(s.V6) }

// Empty says the database has no network for the key: not an error (a
// small country may be missing from a database), but worth a warning,
// since a rule on it matches nothing.
func (s Set) Empty() bool { return s.Len() == 0 }

// Prefixes is V4 then V6, in one new slice.
func (s Set) Prefixes() []netip.Prefix { return slices.Concat(s.V4, s.V6) }

// Countries returns one Set per country code, in the order given (repeats
// dropped). A code is two ASCII letters, either case; anything else is an
// error, naming every such code. A network's country is its
// country.iso_code; a network without one (anycast, satellite providers)
// counts for its registered_country.iso_code, as MaxMind advises. It is an
// error when no network of the database has either (an ASN database).
func (db *DB) Countries(codes []string) ([]Set, error) {
	var keys, bad []string
	for _, c := range codes {
		if len(c) != 2 || !isLetter(c[0]) || !isLetter(c[1]) {
			bad = append(bad, strconv.Quote(c))
			continue
		}
		keys = append(keys, strings.ToUpper(c))
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("geoip: not ISO 3166-1 alpha-2 country codes (two letters, like FR): %s", strings.Join(bad, ", "))
	}
	sets, found, err := db.collect(keys, countryOf)
	if err == nil && !found {
		err = fmt.Errorf("geoip: %s (%s) has no country data", db.path, db.r.Metadata.DatabaseType)
	}
	return sets, err
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// ASNs returns one Set per autonomous system number, in the order given
// (repeats dropped), from a database with autonomous_system_number
// (GeoLite2-ASN, GeoIP2-ISP). AS 0 is an error (RFC 7607: it is no
// system's); so is a database where no network has a number.
func (db *DB) ASNs(asns []uint32) ([]Set, error) {
	var keys []string
	for _, a := range asns {
		if a == 0 {
			return nil, errors.New("geoip: AS 0 is reserved (RFC 7607) and names no network")
		}
		keys = append(keys, asKey(a))
	}
	sets, found, err := db.collect(keys, asnOf)
	if err == nil && !found {
		err = fmt.Errorf("geoip: %s (%s) has no autonomous_system_number data", db.path, db.r.Metadata.DatabaseType)
	}
	return sets, err
}

func asKey(a uint32) string { return "AS" + strconv.FormatUint(uint64(a), 10) }

// A record's key (and name), as one of the two layouts has it.
type keyFunc func(res maxminddb.Result) (key, name string, err error)

func countryOf(res maxminddb.Result) (string, string, error) {
	var rec struct {
		Country struct {
			ISOCode string `maxminddb:"iso_code"`
		} `maxminddb:"country"`
		Registered struct {
			ISOCode string `maxminddb:"iso_code"`
		} `maxminddb:"registered_country"`
	}
	if err := res.Decode(&rec); err != nil {
		return "", "", err
	}
	code := rec.Country.ISOCode
	if code == "" {
		code = rec.Registered.ISOCode
	}
	return strings.ToUpper(code), "", nil
}

func asnOf(res maxminddb.Result) (string, string, error) {
	var rec struct {
		ASN uint32 `maxminddb:"autonomous_system_number"`
		Org string `maxminddb:"autonomous_system_organization"`
	}
	if err := res.Decode(&rec); err != nil {
		return "", "", err
	}
	if rec.ASN == 0 {
		return "", "", nil
	}
	return asKey(rec.ASN), rec.Org, nil
}

// collect walks every network once and gathers those whose record has one
// of keys. found says whether any record had a key at all: a database
// without the field is the wrong kind, which empty sets would hide.
func (db *DB) collect(keys []string, keyOf keyFunc) (sets []Set, found bool, err error) {
	if len(keys) == 0 {
		return nil, true, nil
	}
	idx := make(map[string]int, len(keys))
	for _, k := range keys {
		if _, ok := idx[k]; !ok {
			idx[k] = len(sets)
			sets = append(sets, Set{Key: k})
		}
	}
	type rec struct {
		set  int // index in sets, -1 for none
		name string
	}
	// Networks share records (a country's many networks point at one):
	// each is decoded once, by its offset in the data section.
	cache := map[uintptr]rec{}
	// A tree of n nodes has at most n+1 leaves, empty ones included (the
	// walk skips the IPv4 aliases without yielding them). A corrupt file
	// whose nodes share children would make the walk exponential: past
	// that bound, it is refused.
	leaves, limit := uint(0), db.r.Metadata.NodeCount+1
	for res := range db.r.Networks(maxminddb.IncludeNetworksWithoutData()) {
		if leaves++; leaves > limit {
			return nil, false, fmt.Errorf("geoip: %s: corrupt: more networks than a tree of %d nodes holds", db.path, limit-1)
		}
		if err := res.Err(); err != nil {
			return nil, false, fmt.Errorf("geoip: %s: %w", db.path, err)
		}
		if !res.Found() {
			continue
		}
		r, ok := cache[res.Offset()]
		if !ok {
			key, name, err := keyOf(res)
			if err != nil {
				return nil, false, fmt.Errorf("geoip: %s: the record of %v: %w", db.path, res.Prefix(), err)
			}
			found = found || key != ""
			r = rec{set: -1, name: name}
			if i, ok := idx[key]; ok && key != "" {
				r.set = i
			}
			cache[res.Offset()] = r
		}
		if r.set < 0 {
			continue
		}
		s := &sets[r.set]
		if s.Name == "" {
			s.Name = r.name
		}
		s.add(res.Prefix())
	}
	for i := range sets {
		sets[i].V4 = Merge(sets[i].V4)
		sets[i].V6 = Merge(sets[i].V6)
	}
	return sets, found, nil
}

var (
	all4      = netip.MustParsePrefix("0.0.0.0/0")
	mapped0   = netip.MustParseAddr("::ffff:0.0.0.0")
	v4Subtree = netip.IPv6Unspecified() // IPv6 databases keep IPv4 at ::/96
)

// add files a network under its family. IPv4-mapped IPv6 is IPv4. An
// IPv6 network shorter than /96 that holds the IPv4 space (::/96, where
// IPv6 databases keep IPv4, or ::ffff:0:0/96) holds all of IPv4 too: a
// lookup of any IPv4 address would find its record.
func (s *Set) add(p netip.Prefix) {
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	p = p.Masked()
	if p.Addr().Is4() {
		s.V4 = append(s.V4, p)
		return
	}
	s.V6 = append(s.V6, p)
	if p.Bits() < 96 && (p.Contains(v4Subtree) || p.Contains(mapped0)) {
		s.V4 = append(s.V4, all4)
	}
}
