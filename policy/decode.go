// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/token"
)

// This file walks the YAML syntax tree. Decoding into Go structs would lose
// the positions of values and stop at the first problem; walking the tree
// keeps a line and column for every message and lets one run report all of
// them.

// decoder collects problems while the policy is decoded.
type decoder struct {
	file string
	dir  string // list files resolve against it
	// namesOnly makes listFile record the list files a policy names
	// without reading them (NamedListFiles).
	namesOnly bool
	listFiles []string // resolved paths of the list files named, in file order
	anchors   []*ast.AnchorNode
	errs      []*Error
	warns     []Diagnostic
	// fleetScopes are the scope: fleet values seen, checked against the
	// fleet: section once the whole file is decoded.
	fleetScopes []posString
	// geo is the geoip: section, geoRefs the places that name countries
	// or ASNs, resolved once everything is decoded (resolveGeo).
	geo     *geoSection
	geoRefs []*geoRef
}

func (d *decoder) errorAt(file string, line, col int, field, msg string) {
	d.errs = append(d.errs, &Error{File: file, Line: max(line, 1), Column: max(col, 1), Field: field, Msg: msg})
}

func (d *decoder) errorf(n ast.Node, field, f string, args ...any) {
	line, col := position(n)
	d.errorAt(d.file, line, col, field, fmt.Sprintf(f, args...))
}

func (d *decoder) warnAt(file string, line, col int, field, msg string) {
	d.warns = append(d.warns, Diagnostic{File: file, Line: max(line, 1), Column: max(col, 1), Field: field, Msg: msg})
}

func (d *decoder) warnf(n ast.Node, field, f string, args ...any) {
	line, col := position(n)
	d.warnAt(d.file, line, col, field, fmt.Sprintf(f, args...))
}

// position is where a node starts, as a 1-based line and column.
func position(n ast.Node) (line, col int) {
	tk := startToken(n)
	if tk == nil || tk.Position == nil {
		return 1, 1
	}
	return max(tk.Position.Line, 1), max(tk.Position.Column, 1)
}

// startToken is the first token of n. Block mappings report their first
// ':' as their token, which is not where a reader looks, so use the key.
func startToken(n ast.Node) *token.Token {
	switch v := n.(type) {
	case nil:
		return nil
	case *ast.DocumentNode:
		if v.Body == nil {
			return v.Start
		}
		return startToken(v.Body)
	case *ast.MappingNode:
		if !v.IsFlowStyle && len(v.Values) > 0 {
			return startToken(v.Values[0])
		}
		return v.Start
	case *ast.MappingValueNode:
		if v.Key == nil {
			return v.Start
		}
		return startToken(v.Key)
	case *ast.SequenceNode:
		return v.Start
	case *ast.AnchorNode:
		return v.Start
	case *ast.AliasNode:
		return v.Start
	case *ast.TagNode:
		return v.Start
	}
	return n.GetToken()
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

func index(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

// deref strips anchors and follows aliases, so `limit: *std` decodes like
// the text the anchor &std names; problems in it are reported there. It
// returns nil, after reporting why, for what cannot be decoded.
func (d *decoder) deref(n ast.Node, field string) ast.Node {
	for range 8 {
		switch v := n.(type) {
		case *ast.AnchorNode:
			n = v.Value
		case *ast.AliasNode:
			n = d.anchor(v)
			if n == nil {
				d.errorf(v, field, "alias *%s names no anchor defined before it", aliasName(v))
				return nil
			}
		case *ast.TagNode:
			d.errorf(v, field, "YAML tags are not supported; quote the value if it starts with !")
			return nil
		case *ast.MergeKeyNode:
			d.errorf(v, field, "merge keys (<<) are not supported")
			return nil
		default:
			return n
		}
	}
	d.errorf(n, field, "aliases nested too deeply")
	return nil
}

func aliasName(a *ast.AliasNode) string {
	if a.Value == nil {
		return ""
	}
	return scalarText(a.Value)
}

// anchor finds the anchor an alias names: the last one with that name
// defined before the alias, as YAML specifies.
func (d *decoder) anchor(a *ast.AliasNode) ast.Node {
	name := aliasName(a)
	aLine, aCol := position(a)
	var found ast.Node
	for _, an := range d.anchors {
		if an.Name == nil || scalarText(an.Name) != name {
			continue
		}
		l, c := position(an)
		if l < aLine || l == aLine && c < aCol {
			found = an.Value
		}
	}
	return found
}

// isNull reports whether n is absent or an explicit null (`key:` or `key: null`).
func isNull(n ast.Node) bool {
	if n == nil {
		return true
	}
	_, ok := n.(*ast.NullNode)
	return ok
}

// field is one entry of a mapping: its key (for positions) and its value.
type field struct {
	key   ast.Node
	value ast.Node
}

// mapping decodes the fields of a mapping node. Unknown fields are errors
// that list the allowed ones; a field whose value is null counts as absent.
// It returns nil when n is not a mapping.
func (d *decoder) mapping(n ast.Node, path string, allowed ...string) map[string]field {
	return d.mappingExt(n, path, nil, allowed...)
}

// mappingExt is mapping with a hook for keys that are neither allowed nor
// unknown (the top level ignores x- keys).
func (d *decoder) mappingExt(n ast.Node, path string, ignore func(string) bool, allowed ...string) map[string]field {
	n = d.deref(n, path)
	if n == nil {
		return nil
	}
	if mv, ok := n.(*ast.MappingValueNode); ok {
		// Older parsers give a one-field mapping as its only field.
		n = &ast.MappingNode{Values: []*ast.MappingValueNode{mv}}
	}
	m, ok := n.(*ast.MappingNode)
	if !ok {
		d.errorf(n, path, "expected a mapping with fields %s, got %s", strings.Join(allowed, ", "), describeNode(n))
		return nil
	}
	out := make(map[string]field, len(m.Values))
	for _, mv := range m.Values {
		key, ok := mv.Key.(*ast.StringNode)
		if !ok {
			if _, merge := mv.Key.(*ast.MergeKeyNode); merge {
				d.errorf(mv.Key, path, "merge keys (<<) are not supported; use defaults, or an alias for a whole value")
			} else {
				d.errorf(mv.Key, path, "field names must be plain words, got %s", describeNode(mv.Key))
			}
			continue
		}
		name := key.Value
		if ignore != nil && ignore(name) {
			continue
		}
		if !slices.Contains(allowed, name) {
			msg := fmt.Sprintf("unknown field %q", name)
			if s := suggest(name, allowed); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			d.errorf(key, path, "%s; allowed: %s", msg, strings.Join(allowed, ", "))
			continue
		}
		v := mv.Value
		if a, ok := v.(*ast.AnchorNode); ok && isNull(a.Value) {
			v = nil
		}
		if isNull(v) {
			continue
		}
		out[name] = field{key: key, value: v}
	}
	return out
}

// sequence decodes a list. Empty lists are errors: for match fields an empty
// list would be ambiguous between "any" and "nothing".
func (d *decoder) sequence(n ast.Node, path, example string) []ast.Node {
	n = d.deref(n, path)
	if n == nil {
		return nil
	}
	s, ok := n.(*ast.SequenceNode)
	if !ok {
		d.errorf(n, path, "expected a list like %s, got %s", example, describeNode(n))
		return nil
	}
	if len(s.Values) == 0 {
		d.errorf(n, path, "empty list; leave the field out instead")
		return nil
	}
	return s.Values
}

// scalar returns the text of a scalar value; numbers and booleans give their
// source text, so `53` and `"53"` read the same. It reports anything else.
func (d *decoder) scalar(n ast.Node, path, what string) (string, bool) {
	n = d.deref(n, path)
	if n == nil {
		return "", false
	}
	switch n.(type) {
	case *ast.StringNode, *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode,
		*ast.LiteralNode, *ast.InfinityNode, *ast.NanNode:
		return scalarText(n), true
	}
	d.errorf(n, path, "expected %s, got %s", what, describeNode(n))
	return "", false
}

func scalarText(n ast.Node) string {
	switch v := n.(type) {
	case *ast.StringNode:
		return v.Value
	case *ast.LiteralNode:
		if v.Value == nil {
			return ""
		}
		return v.Value.Value
	}
	if tk := n.GetToken(); tk != nil {
		return tk.Value
	}
	return ""
}

// describeNode names a node's kind for "expected X, got Y" messages.
func describeNode(n ast.Node) string {
	switch v := n.(type) {
	case nil, *ast.NullNode:
		return "nothing"
	case *ast.MappingNode, *ast.MappingValueNode:
		return "a mapping"
	case *ast.SequenceNode:
		return "a list"
	case *ast.StringNode, *ast.LiteralNode:
		return fmt.Sprintf("%q", scalarText(v))
	}
	return scalarText(n)
}

// suggest returns the allowed name closest to a misspelt one, if any is close.
func suggest(name string, allowed []string) string {
	best, bestDist := "", 3
	for _, a := range allowed {
		if d := editDistance(name, a); d < bestDist {
			best, bestDist = a, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
