// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"bytes"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"

	"github.com/goccy/go-yaml/ast"

	"github.com/xdplimit/xdplimit/internal/fileutil"
)

// Limits on list files. Problems beyond maxListProblems in one file are
// summarised: a file in the wrong format would otherwise bury everything
// else under one message per line.
const (
	maxListFileSize = 64 << 20
	maxListProblems = 10
	maxOverlapWarns = 20
)

// listEntry is one prefix of allow or deny with where it was written.
type listEntry struct {
	p         netip.Prefix
	file      string
	line, col int
	field     string
	geo       bool // from countries or asns: the databases put it there
}

func (e listEntry) where() string { return fmt.Sprintf("%s:%d:%d", e.file, e.line, e.col) }

// addrList decodes allow or deny: a list of CIDRs, or a mapping with cidrs,
// files (netset files: one address or CIDR per line), countries and asns
// (geoip.go: resolved once the whole policy is decoded).
func (d *decoder) addrList(f field, path string) []listEntry {
	if f.value == nil {
		return nil
	}
	n := d.deref(f.value, path)
	if n == nil {
		return nil
	}
	if _, ok := n.(*ast.SequenceNode); ok {
		return d.inlineCIDRs(n, path)
	}
	if _, ok := n.(*ast.MappingNode); !ok {
		d.errorf(n, path, "expected a list of CIDRs or a mapping with cidrs, files, countries and asns, got %s", describeNode(n))
		return nil
	}
	m := d.mapping(n, path, "cidrs", "files", "countries", "asns")
	d.geoList(m, path)
	var out []listEntry
	if c, ok := m["cidrs"]; ok {
		out = append(out, d.inlineCIDRs(c.value, join(path, "cidrs"))...)
	}
	if fs, ok := m["files"]; ok {
		fpath := join(path, "files")
		for i, e := range d.sequence(fs.value, fpath, "[allow.netset]") {
			epath := index(fpath, i)
			name, ok := d.scalar(e, epath, "a file name")
			if !ok {
				continue
			}
			out = append(out, d.listFile(e, epath, name)...)
		}
	}
	return out
}

func (d *decoder) inlineCIDRs(n ast.Node, path string) []listEntry {
	var out []listEntry
	for i, e := range d.sequence(n, path, "[192.0.2.0/24]") {
		epath := index(path, i)
		p, ok := d.prefix(e, epath)
		if !ok {
			continue
		}
		line, col := position(e)
		out = append(out, listEntry{p: p, file: d.file, line: line, col: col, field: epath})
	}
	return out
}

// listFile reads a netset file: one address or CIDR per line; blank lines
// and comments (from # or ; to the end of the line, as in FireHOL and
// Spamhaus lists) are skipped. A relative name resolves against the
// policy file's directory, so a policy and its lists move together.
func (d *decoder) listFile(n ast.Node, field, name string) []listEntry {
	path := name
	if !filepath.IsAbs(path) {
		path = filepath.Join(d.dir, path)
	}
	if !slices.Contains(d.listFiles, path) {
		d.listFiles = append(d.listFiles, path)
	}
	if d.namesOnly {
		return nil
	}
	data, err := fileutil.ReadRegular(path, maxListFileSize)
	if err != nil {
		d.errorf(n, field, "cannot read list file: %v", err)
		return nil
	}
	var out []listEntry
	bad, masked := 0, 0
	for i, line := range bytes.Split(data, []byte("\n")) {
		if j := bytes.IndexAny(line, "#;"); j >= 0 {
			line = line[:j]
		}
		text := bytes.TrimSpace(line)
		if len(text) == 0 {
			continue
		}
		lineNo, col := i+1, bytes.Index(line, text)+1
		p, warn, err := parsePrefix(string(text))
		if err != nil {
			if bad++; bad <= maxListProblems {
				d.errorAt(path, lineNo, col, field, err.Error())
			}
			continue
		}
		if warn != "" {
			if masked++; masked <= maxListProblems {
				d.warnAt(path, lineNo, col, field, warn)
			}
		}
		out = append(out, listEntry{p: p, file: path, line: lineNo, col: col, field: field})
	}
	if bad > maxListProblems {
		d.errorf(n, field, "%s has %d more bad lines not shown", path, bad-maxListProblems)
	}
	if masked > maxListProblems {
		d.warnf(n, field, "%s has %d more entries with host bits set, not shown", path, masked-maxListProblems)
	}
	return out
}

// checkOverlap deduplicates allow and deny and compares them. The datapath
// looks an address up in both and the longest matching prefix decides, so
// one list inside the other is legitimate (a hole punched in a block) but
// worth a warning; the same prefix in both has no answer and is an error.
func (d *decoder) checkOverlap(allow, deny []listEntry) (allowP, denyP []netip.Prefix) {
	allowSet, allowP := dedup(allow)
	denySet, denyP := dedup(deny)
	for _, e := range deny {
		if a, ok := allowSet[e.p]; ok && denySet[e.p] == e {
			d.errorAt(e.file, e.line, e.col, e.field, fmt.Sprintf("%s is in both allow (%s) and deny; remove it from one", e.p, a.where()))
		}
	}
	warns := 0
	inside := func(inner, outer map[netip.Prefix]listEntry, innerName, outerName string) {
		lengths := prefixLengths(outer)
		for _, p := range sortedKeys(inner) {
			e := inner[p]
			for b := p.Bits() - 1; b >= 0; b-- {
				if !lengths[lenKey{p.Addr().Is4(), b}] {
					continue
				}
				o, ok := outer[netip.PrefixFrom(p.Addr(), b).Masked()]
				if !ok {
					continue
				}
				if warns++; warns <= maxOverlapWarns {
					d.warnAt(e.file, e.line, e.col, e.field, fmt.Sprintf(
						"%s %s is inside %s %s (%s); the longest prefix decides, so %s is %s",
						innerName, p, outerName, o.p, o.where(), p, map[string]string{"allow": "allowed", "deny": "denied"}[innerName]))
				}
				break
			}
		}
	}
	inside(denySet, allowSet, "deny", "allow")
	inside(allowSet, denySet, "allow", "deny")
	if warns > maxOverlapWarns {
		d.warnAt(d.file, 1, 1, "", fmt.Sprintf("%d more allow/deny overlaps not shown", warns-maxOverlapWarns))
	}
	return allowP, denyP
}

// dedup keeps the first place each prefix was written, and returns the
// prefixes sorted.
func dedup(es []listEntry) (map[netip.Prefix]listEntry, []netip.Prefix) {
	set := make(map[netip.Prefix]listEntry, len(es))
	for _, e := range es {
		if _, ok := set[e.p]; !ok {
			set[e.p] = e
		}
	}
	return set, sortedKeys(set)
}

func sortedKeys(set map[netip.Prefix]listEntry) []netip.Prefix {
	ps := make([]netip.Prefix, 0, len(set))
	for p := range set {
		ps = append(ps, p)
	}
	slices.SortFunc(ps, comparePrefix)
	if len(ps) == 0 {
		return nil
	}
	return ps
}

// lenKey is a prefix length within one IP version.
type lenKey struct {
	is4  bool
	bits int
}

// prefixLengths lists the prefix lengths present in a set, so that looking
// for the prefixes containing an address tries only lengths that exist.
func prefixLengths(set map[netip.Prefix]listEntry) map[lenKey]bool {
	ls := map[lenKey]bool{}
	for p := range set {
		ls[lenKey{p.Addr().Is4(), p.Bits()}] = true
	}
	return ls
}
