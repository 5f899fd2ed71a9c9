// SPDX-License-Identifier: Apache-2.0

// Package termsafe makes text from outside safe to print on a terminal.
//
// Ban reasons and origins, fleet host ids, Redis error text, CrowdSec
// scenarios and policy paths come from whoever could write the fleet's Redis,
// a feed, the pinned maps or a file name. Printed raw, an escape sequence in
// one of them retitles, clears or rewrites the operator's terminal, a
// newline forges an output line, and a bidi override reorders what follows
// it. Escape shows such characters as Go's %q would, in printable ASCII.
package termsafe

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Escape returns s with every character a terminal could act on written as
// an escape: invalid UTF-8 bytes as \xNN; control characters (C0 including
// tab and newline, DEL, C1) and every other character that is not graphic
// (bidi overrides and isolates, zero-width and line separators: Unicode's
// format and separator classes) as \t, \n, \r, \xNN, \uNNNN or \UNNNNNNNN.
// Letters, marks, numbers, punctuation, symbols and the ASCII space stay,
// in any script (strconv.IsPrint).
//
// Backslashes and quotes stay as they are, unlike %q: Escape(Escape(s)) is
// Escape(s), so text escaped where it entered (a ban's reason) reads the same
// when a command escapes it again before printing it.
func Escape(s string) string {
	if Clean(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for len(s) > 0 {
		u, n := unit(s)
		b.WriteString(u)
		s = s[n:]
	}
	return b.String()
}

// EscapeLines is Escape of each line of s, the lines kept: for a message
// whose lines are its own (a policy's errors, one per line) that quotes
// text from outside. A newline inside the quoted text still starts a line,
// so a message's author escapes what it quotes from one line (a value, a
// name) with Escape where it enters, as the policy compiler's %q does.
func EscapeLines(s string) string {
	if Clean(strings.ReplaceAll(s, "\n", "")) {
		return s
	}
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = Escape(l)
	}
	return strings.Join(lines, "\n")
}

// Clean says whether Escape would leave s unchanged.
func Clean(s string) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c < 0x7f {
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n <= 1 || c < 0x80 || !strconv.IsPrint(r) {
			return false
		}
		i += n
	}
	return true
}

// Clip is Escape(s) cut to at most max bytes, between two characters or
// escapes, never inside one (so the result is valid UTF-8 and never ends in
// half an escape). It is a prefix of Escape(s).
func Clip(s string, max int) string {
	if len(s) <= max && Clean(s) {
		return s
	}
	var b strings.Builder
	for len(s) > 0 {
		u, n := unit(s)
		if b.Len()+len(u) > max {
			break
		}
		b.WriteString(u)
		s = s[n:]
	}
	return b.String()
}

// unit is the escaped form of the first character of s, and the bytes of s
// it stands for.
func unit(s string) (string, int) {
	r, n := utf8.DecodeRuneInString(s)
	switch {
	case r == utf8.RuneError && n <= 1:
		return `\x` + hex2(s[0]), 1
	case r >= 0x20 && r < 0x7f:
		return s[:1], 1
	case r == '\t':
		return `\t`, 1
	case r == '\n':
		return `\n`, 1
	case r == '\r':
		return `\r`, 1
	case r < 0x80:
		return `\x` + hex2(byte(r)), 1
	case strconv.IsPrint(r):
		return s[:n], n
	}
	// The body of strconv.QuoteRuneToASCII: \u or \U with the code point.
	q := strconv.QuoteRuneToASCII(r)
	return q[1 : len(q)-1], n
}

func hex2(c byte) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[c>>4], digits[c&0xf]})
}

// JSON makes encoding/json's output safe for a terminal and still the same
// JSON: encoding/json escapes C0 controls but writes DEL, C1 controls and
// bidi or other format characters raw. They can only stand inside strings,
// where \uXXXX (a surrogate pair past U+FFFF) decodes to the same text.
func JSON(b []byte) []byte {
	var out strings.Builder
	out.Grow(len(b))
	for _, r := range string(b) {
		if r < 0x7f || strconv.IsPrint(r) {
			out.WriteRune(r)
			continue
		}
		if r > 0xffff {
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&out, `\u%04x\u%04x`, r1, r2)
			continue
		}
		fmt.Fprintf(&out, `\u%04x`, r)
	}
	return []byte(out.String())
}
