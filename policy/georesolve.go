// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/goccy/go-yaml/ast"

	"github.com/xdplimit/xdplimit/geoip"
)

// Once the policy is decoded: the GeoIP databases read, each country and
// AS the policy names turned into its prefixes, and those put in the rules
// and lists that named them.

// resolveGeo reads the databases the policy's countries and ASNs need (each
// once, in one walk) and puts their prefixes where they were named: a
// rule's SrcGeo (its countries' networks, within its ASNs' and its
// src_cidrs when it has them) and the allow and deny lists.
func (d *decoder) resolveGeo(p *Policy, allow, deny *[]listEntry) {
	if d.geo != nil {
		p.GeoIP = &GeoIP{CountryDB: d.geo.countryDB, ASNDB: d.geo.asnDB}
	}
	if len(d.geoRefs) == 0 || d.namesOnly {
		return
	}
	if p.GeoIP == nil {
		p.GeoIP = &GeoIP{}
	}
	sets := d.readGeoSets(p.GeoIP)
	if sets == nil {
		return // errors reported
	}
	union := func(keys []geoKey) []netip.Prefix {
		var ps []netip.Prefix
		for _, k := range keys {
			ps = append(ps, sets[k.key].Prefixes()...)
		}
		return geoip.MergeAll(ps)
	}
	byPath := map[string]*geoRef{}
	for _, r := range d.geoRefs {
		byPath[r.path] = r
	}
	for i := range p.Rules {
		r := &p.Rules[i]
		ref := byPath[join(index("rules", i), "match")]
		if ref == nil || !r.Match.geoSrc() {
			continue
		}
		src := union(ref.countries)
		switch {
		case len(ref.countries) == 0:
			src = union(ref.asns)
		case len(ref.asns) > 0:
			src = geoip.Intersect(src, union(ref.asns))
		}
		if len(r.Match.SrcCIDRs) > 0 {
			src = geoip.Intersect(src, geoip.MergeAll(r.Match.SrcCIDRs))
		}
		r.Match.SrcGeo = src
		if len(src) == 0 {
			at := ref.countryNode
			if at == nil {
				at = ref.asNode
			}
			d.warnf(at, ref.path, "rule %s never matches: its countries and ASNs (and src_cidrs) hold no network in common", r.Name)
		}
		p.GeoIP.use("rule "+r.Name, src, true)
	}
	for _, l := range []struct {
		name string
		list *[]listEntry
	}{{"allow", allow}, {"deny", deny}} {
		ref := byPath[l.name]
		if ref == nil {
			continue
		}
		ps := union(append(slices.Clone(ref.countries), ref.asns...))
		line, col := position(ref.countryNode)
		if ref.countryNode == nil {
			line, col = position(ref.asNode)
		}
		for _, pr := range ps {
			*l.list = append(*l.list, listEntry{p: pr, file: d.file, line: line, col: col, field: l.name, geo: true})
		}
		p.GeoIP.use(l.name, ps, false)
	}
	*deny = d.geoBoth(*allow, *deny)
}

// use records what one rule or list compiles to.
func (g *GeoIP) use(where string, ps []netip.Prefix, rules bool) {
	u := GeoUse{Where: where}
	for _, p := range ps {
		if p.Addr().Is4() {
			u.V4++
		} else {
			u.V6++
		}
	}
	u.Bytes = geoip.TrieBytes(u.V4, u.V6, rules)
	g.Uses = append(g.Uses, u)
}

// readGeoSets computes the set of every country and AS the policy names,
// by key, reading each database once; nil after reporting an error.
func (d *decoder) readGeoSets(g *GeoIP) map[string]geoip.Set {
	var countries []string
	var asns []uint32
	var cRef, aRef *geoRef
	for _, r := range d.geoRefs {
		for _, k := range r.countries {
			countries = append(countries, k.key)
		}
		for _, k := range r.asns {
			asns = append(asns, k.asn)
		}
		if cRef == nil && len(r.countries) > 0 {
			cRef = r
		}
		if aRef == nil && len(r.asns) > 0 {
			aRef = r
		}
	}
	geo := d.geo
	if geo == nil {
		geo = &geoSection{}
	}
	sets := map[string]geoip.Set{}
	ok := true
	if cRef != nil {
		ok = d.readGeoDB(geoDB{cRef, cRef.countryNode, "countries", "country_db", geo.countryDB, geo.countryNode, &g.Country},
			func(db *geoip.DB) ([]geoip.Set, error) { return db.Countries(countries) }, sets)
	}
	if aRef != nil {
		ok = d.readGeoDB(geoDB{aRef, aRef.asNode, "ASNs", "asn_db", geo.asnDB, geo.asnNode, &g.ASN},
			func(db *geoip.DB) ([]geoip.Set, error) { return db.ASNs(asns) }, sets) && ok
	}
	if !ok {
		return nil
	}
	d.reportGeoSets(g, sets)
	return sets
}

// geoDB is one database a policy needs: the first place that needs it
// (for the error when none is given), the field that names it.
type geoDB struct {
	ref         *geoRef
	refNode     ast.Node
	what, field string
	path        string
	pathNode    ast.Node
	md          **geoip.Metadata
}

// readGeoDB reads one database's sets into sets; false after reporting an
// error.
func (d *decoder) readGeoDB(g geoDB, read func(*geoip.DB) ([]geoip.Set, error), sets map[string]geoip.Set) bool {
	if g.path == "" {
		d.errorf(g.refNode, g.ref.path, "%s need a database: add geoip: {%s: FILE} (docs/geoip.md)", g.what, g.field)
		return false
	}
	db, err := geoip.Open(g.path)
	if err == nil {
		var got []geoip.Set
		if got, err = read(db); err == nil {
			md := db.Metadata()
			*g.md = &md
			for _, s := range got {
				sets[s.Key] = s
			}
		}
		db.Close()
	}
	if err != nil {
		d.errorf(g.pathNode, join("geoip", g.field), "%v", err)
		return false
	}
	return true
}

// reportGeoSets records every set for policy check, in the order first
// named, and warns about each that the database has no network for: a
// rule or list naming only it matches nothing.
func (d *decoder) reportGeoSets(g *GeoIP, sets map[string]geoip.Set) {
	seen := map[string]bool{}
	for _, r := range d.geoRefs {
		for _, k := range append(slices.Clone(r.countries), r.asns...) {
			s := sets[k.key]
			if s.Empty() {
				d.warnf(k.node, r.path, "%s: no network of the database is in it, so it matches nothing", k.key)
			}
			if !seen[k.key] {
				seen[k.key] = true
				g.Sets = append(g.Sets, GeoSet{Key: k.key, Name: s.Name, V4: len(s.V4), V6: len(s.V6)})
			}
		}
	}
}

// geoBoth settles a prefix both in allow and in deny when the databases
// put it there (a country allowed holds the same network as an AS denied):
// allow wins, as it would for a longer allowed prefix, with one warning.
// The same prefix written in both by hand stays an error (checkOverlap).
func (d *decoder) geoBoth(allow, deny []listEntry) []listEntry {
	allowed := make(map[netip.Prefix]bool, len(allow))
	geoAllowed := map[netip.Prefix]bool{}
	for _, e := range allow {
		allowed[e.p] = true
		if e.geo {
			geoAllowed[e.p] = true
		}
	}
	out := deny[:0]
	dropped := 0
	var first listEntry
	for _, e := range deny {
		if allowed[e.p] && (e.geo || geoAllowed[e.p]) {
			if dropped == 0 {
				first = e
			}
			dropped++
			continue
		}
		out = append(out, e)
	}
	if dropped > 0 {
		d.warnAt(first.file, first.line, first.col, first.field, fmt.Sprintf(
			"%d prefixes (%s first) are both allowed and denied by the countries and ASNs of the lists: allowed", dropped, first.p))
	}
	return out
}
