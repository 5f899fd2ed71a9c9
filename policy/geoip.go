// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml/ast"

	"github.com/xdplimit/xdplimit/geoip"
)

// GeoIP is the geoip: section, and what the policy took from its
// databases (docs/geoip.md): the MaxMind DB files that turn the countries
// and autonomous systems named by src_countries, src_asns and the
// countries and asns of allow and deny into prefixes. The databases are
// read when the policy is, so a reload reads them anew; they are among
// the policy's ListFiles.
type GeoIP struct {
	// CountryDB and ASNDB are the database files, resolved against the
	// policy's directory ("" when not given).
	CountryDB, ASNDB string
	// Country and ASN describe the databases read (nil: not used).
	Country, ASN *geoip.Metadata
	// Sets are the countries and autonomous systems named, in the order
	// first named, with their prefixes.
	Sets []GeoSet
	// Uses are the rules and lists that name them, with what each
	// compiles to.
	Uses []GeoUse
}

// GeoSet is one country ("DE") or autonomous system ("AS64496", with its
// organisation as the database names it) and its prefixes per family.
type GeoSet struct {
	Key, Name string
	V4, V6    int
}

// GeoUse is a rule's source set or a list's countries and ASNs: its
// prefixes per family and the kernel memory they take in their trie.
type GeoUse struct {
	Where  string // "rule NAME", "allow" or "deny"
	V4, V6 int
	Bytes  uint64
}

// geoKey is one country code or AS number as written.
type geoKey struct {
	key  string // "DE", "AS64496"
	asn  uint32 // 0 for a country
	node ast.Node
}

// geoRef is one place that names countries or ASNs: a rule's match or a
// list (allow, deny).
type geoRef struct {
	path                string // "rules[2].match", "allow"
	countryNode, asNode ast.Node
	countries, asns     []geoKey
}

// geoSection is the decoded geoip: section.
type geoSection struct {
	countryDB, asnDB     string
	countryNode, asnNode ast.Node
}

// geoipSection decodes the top-level geoip: section:
//
//	geoip: {country_db: /var/lib/GeoIP/GeoLite2-Country.mmdb, asn_db: /var/lib/GeoIP/GeoLite2-ASN.mmdb}
//
// The files are the policy's: a watcher watches them, and Load reads them
// when a rule or list names a country or an AS.
func (d *decoder) geoipSection(f field) {
	m := d.mapping(f.value, "geoip", "country_db", "asn_db")
	if m == nil {
		return
	}
	g := &geoSection{}
	for _, c := range []struct {
		name string
		dst  *string
		node *ast.Node
	}{{"country_db", &g.countryDB, &g.countryNode}, {"asn_db", &g.asnDB, &g.asnNode}} {
		vf, ok := m[c.name]
		if !ok {
			continue
		}
		if s, ok := d.scalar(vf.value, join("geoip", c.name), "a file path"); ok {
			*c.dst, *c.node = d.resolve(s), vf.value
			if !slices.Contains(d.listFiles, *c.dst) {
				d.listFiles = append(d.listFiles, *c.dst)
			}
		}
	}
	if g.countryDB == "" && g.asnDB == "" {
		d.errorf(f.value, "geoip", "give country_db, asn_db or both: MaxMind DB files (docs/geoip.md)")
	}
	d.geo = g
}

// geoField decodes a list of country codes (two letters, either case) or
// of AS numbers (64496 or AS64496) into ref, sorted and deduplicated.
func (d *decoder) geoField(f field, path string, asns bool, ref *geoRef) {
	what, example := "a country code", "[DE, FR]"
	if asns {
		what, example = "an AS number", "[64496, AS64497]"
	}
	var keys []geoKey
	for i, e := range d.sequence(f.value, path, example) {
		epath := index(path, i)
		s, ok := d.scalar(e, epath, what)
		if !ok {
			continue
		}
		if !asns {
			if len(s) != 2 || !isASCIILetter(s[0]) || !isASCIILetter(s[1]) {
				d.errorf(e, epath, "%q is not an ISO 3166-1 alpha-2 country code: two letters, like DE", s)
				continue
			}
			keys = append(keys, geoKey{key: strings.ToUpper(s), node: e})
			continue
		}
		n, err := strconv.ParseUint(strings.TrimPrefix(strings.ToUpper(s), "AS"), 10, 32)
		if err != nil || n == 0 {
			d.errorf(e, epath, "%q is not an AS number: 1 to 4294967295, as 64496 or AS64496 (AS 0 names no network)", s)
			continue
		}
		keys = append(keys, geoKey{key: "AS" + strconv.FormatUint(n, 10), asn: uint32(n), node: e})
	}
	slices.SortStableFunc(keys, func(a, b geoKey) int {
		if a.asn != b.asn {
			return int(int64(a.asn) - int64(b.asn))
		}
		return strings.Compare(a.key, b.key)
	})
	keys = slices.CompactFunc(keys, func(a, b geoKey) bool { return a.key == b.key })
	if asns {
		ref.asns, ref.asNode = keys, f.key
	} else {
		ref.countries, ref.countryNode = keys, f.key
	}
}

func isASCIILetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// geoMatch decodes a match's src_countries and src_asns.
func (d *decoder) geoMatch(mt *Match, m map[string]field, path string) {
	ref := &geoRef{path: path}
	if f, ok := m["src_countries"]; ok {
		d.geoField(f, join(path, "src_countries"), false, ref)
		for _, k := range ref.countries {
			mt.SrcCountries = append(mt.SrcCountries, k.key)
		}
	}
	if f, ok := m["src_asns"]; ok {
		d.geoField(f, join(path, "src_asns"), true, ref)
		for _, k := range ref.asns {
			mt.SrcASNs = append(mt.SrcASNs, k.asn)
		}
	}
	if len(ref.countries)+len(ref.asns) > 0 {
		d.geoRefs = append(d.geoRefs, ref)
	}
}

// geoList decodes the countries and asns of allow or deny.
func (d *decoder) geoList(m map[string]field, path string) {
	ref := &geoRef{path: path}
	if f, ok := m["countries"]; ok {
		d.geoField(f, join(path, "countries"), false, ref)
	}
	if f, ok := m["asns"]; ok {
		d.geoField(f, join(path, "asns"), true, ref)
	}
	if len(ref.countries)+len(ref.asns) > 0 {
		d.geoRefs = append(d.geoRefs, ref)
	}
}

// geoSrc reports whether a match constrains the source by country or AS.
func (m Match) geoSrc() bool { return len(m.SrcCountries)+len(m.SrcASNs) > 0 }

// Sources is the set of sources the match admits, and whether it
// constrains the source at all: SrcGeo when it names countries or ASNs
// (then an empty set matches nothing), else SrcCIDRs.
func (m Match) Sources() ([]netip.Prefix, bool) {
	if m.geoSrc() {
		return m.SrcGeo, true
	}
	return m.SrcCIDRs, len(m.SrcCIDRs) > 0
}

// describe writes the section for policy check: the databases, each set's
// prefixes, and what each rule and list compiles to, with its memory.
func (g *GeoIP) describe(w io.Writer) {
	db := func(what, path string, md *geoip.Metadata) string {
		if path == "" {
			return ""
		}
		if md == nil {
			return fmt.Sprintf(" %s from %s (not used);", what, path)
		}
		return fmt.Sprintf(" %s from %s (%s, built %s);", what, path, md.Type, md.BuildTime.Format("2006-01-02"))
	}
	fmt.Fprintf(w, "geoip:%s%s\n", db("countries", g.CountryDB, g.Country), db("ASNs", g.ASNDB, g.ASN))
	for _, s := range g.Sets {
		name := ""
		if s.Name != "" {
			name = " (" + s.Name + ")"
		}
		fmt.Fprintf(w, "  %s%s: %d IPv4 and %d IPv6 %s\n", s.Key, name, s.V4, s.V6, plural(s.V4+s.V6, "prefix", "prefixes"))
	}
	var total uint64
	for _, u := range g.Uses {
		fmt.Fprintf(w, "  %s: %d IPv4 and %d IPv6 %s, about %s of kernel memory\n", u.Where, u.V4, u.V6,
			plural(u.V4+u.V6, "prefix", "prefixes"), bytesString(u.Bytes))
		total += u.Bytes
	}
	if len(g.Uses) > 1 {
		fmt.Fprintf(w, "  in all about %s; twice that while a reload writes the next generation\n", bytesString(total))
	} else if len(g.Uses) == 1 {
		fmt.Fprintf(w, "  twice that while a reload writes the next generation\n")
	}
}

// bytesString writes a memory size in binary units: "512 B", "3.2 MiB".
func bytesString(b uint64) string {
	switch {
	case b < 1<<10:
		return fmt.Sprintf("%d B", b)
	case b < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	case b < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
}
