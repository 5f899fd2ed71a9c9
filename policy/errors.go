// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Error is one problem that makes a policy file unusable. It is located in
// the policy file, or in a list file the policy names (File says which).
type Error struct {
	File   string
	Line   int    // 1-based
	Column int    // 1-based, in bytes
	Field  string // dotted path such as rules[0].limit.rate; empty for YAML syntax errors
	Msg    string
}

// Error formats e like a compiler message:
//
//	p.yaml:12:7: rules[0].limit.rate: "1000/sec" is not a rate; use ...
func (e *Error) Error() string { return format(e.File, e.Line, e.Column, e.Field, e.Msg) }

// Diagnostic is a warning: the policy is usable, but probably not what its
// author meant. It has the same fields and format as Error.
type Diagnostic struct {
	File   string
	Line   int
	Column int
	Field  string
	Msg    string
}

func (d Diagnostic) String() string { return format(d.File, d.Line, d.Column, d.Field, d.Msg) }

func format(file string, line, col int, field, msg string) string {
	var b strings.Builder
	b.WriteString(file)
	if line > 0 {
		fmt.Fprintf(&b, ":%d:%d", line, col)
	}
	b.WriteString(": ")
	if field != "" {
		b.WriteString(field)
		b.WriteString(": ")
	}
	b.WriteString(msg)
	return b.String()
}

// ErrorList is every problem found in a policy, sorted by position. Parse
// and Load return it (never an empty one) instead of the first problem alone,
// so one run of `xdplimit policy check` shows everything to fix.
type ErrorList []*Error

// Error puts one problem per line.
func (l ErrorList) Error() string {
	s := make([]string, len(l))
	for i, e := range l {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// Unwrap lets errors.As find the individual *Error values.
func (l ErrorList) Unwrap() []error {
	errs := make([]error, len(l))
	for i, e := range l {
		errs[i] = e
	}
	return errs
}

// located is what errors and warnings share, so both sort the same way.
type located struct {
	File       string
	Line, Col  int
	Field, Msg string
}

// comparePos orders the policy file's own findings first, then list files
// by name, each by line and column. Field and Msg only break ties, to make
// the order deterministic.
func comparePos(policyFile string, a, b located) int {
	if c := cmpBool(a.File != policyFile, b.File != policyFile); c != 0 {
		return c
	}
	return cmp.Or(
		cmp.Compare(a.File, b.File),
		cmp.Compare(a.Line, b.Line),
		cmp.Compare(a.Col, b.Col),
		cmp.Compare(a.Field, b.Field),
		cmp.Compare(a.Msg, b.Msg),
	)
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// sortErrors sorts errs by position and drops exact repeats (an alias used
// twice reports the problems of the text it names twice).
func sortErrors(policyFile string, errs []*Error) ErrorList {
	key := func(e *Error) located { return located{e.File, e.Line, e.Column, e.Field, e.Msg} }
	slices.SortStableFunc(errs, func(a, b *Error) int { return comparePos(policyFile, key(a), key(b)) })
	return slices.CompactFunc(errs, func(a, b *Error) bool { return *a == *b })
}

func sortWarnings(policyFile string, ws []Diagnostic) []Diagnostic {
	key := func(d Diagnostic) located { return located{d.File, d.Line, d.Column, d.Field, d.Msg} }
	slices.SortStableFunc(ws, func(a, b Diagnostic) int { return comparePos(policyFile, key(a), key(b)) })
	return slices.Compact(ws)
}
