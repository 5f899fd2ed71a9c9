// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

// From the policy's bytes to its one YAML document: the checks of the text
// the YAML parser must not see (too large, nested too deep, a flag it would
// read as a tag), the parser kept from taking the process down, and its
// errors made to say what to do.

// document checks the policy's text and parses it into its one YAML
// document, whose body it returns, recording the anchors; nil after an
// error.
func (d *decoder) document(data []byte) ast.Node {
	if len(data) > maxPolicySize {
		d.errorAt(d.file, 1, 1, "", fmt.Sprintf("policy file is %d bytes, more than the limit of %d; put long address lists in list files", len(data), maxPolicySize))
		return nil
	}
	if line, col := tooDeep(data); line > 0 {
		d.errorAt(d.file, line, col, "", fmt.Sprintf("nested more than %d levels deep", flowDepthLimit))
		return nil
	}
	if line, col, flag := unquotedNegation(data); line > 0 {
		d.errorAt(d.file, line, col, "", fmt.Sprintf("write %q in quotes: YAML reads an unquoted ! as a tag", flag))
		return nil
	}
	file, err := parseYAML(data)
	if err != nil {
		d.syntaxError(data, err)
		return nil
	}
	var body ast.Node
	for _, doc := range file.Docs {
		if doc == nil || doc.Body == nil {
			continue
		}
		if body != nil {
			d.errorf(doc, "", "a policy file holds one YAML document; this is a second one")
			return nil
		}
		body = doc.Body
		for _, a := range ast.Filter(ast.AnchorType, doc) {
			if an, ok := a.(*ast.AnchorNode); ok {
				d.anchors = append(d.anchors, an)
			}
		}
	}
	if body == nil {
		// An empty file is more likely a failed write than a wish to let
		// everything through, so it is not an empty policy.
		d.errorAt(d.file, 1, 1, "", "policy file is empty; a policy that limits nothing is `rules: []`")
		return nil
	}
	return body
}

// parseYAML runs the YAML parser. It turns a panic in the parser into an
// error, so one malformed file cannot take down a running daemon that
// reloads its policy.
func parseYAML(data []byte) (f *ast.File, err error) {
	defer func() {
		if r := recover(); r != nil {
			f, err = nil, fmt.Errorf("YAML parser failed: %v", r)
		}
	}()
	return parser.ParseBytes(data, 0)
}

// syntaxError reports a YAML parser error at its position.
func (d *decoder) syntaxError(data []byte, err error) {
	line, col, msg := 1, 1, err.Error()
	if ye, ok := err.(yaml.Error); ok {
		msg = ye.GetMessage()
		if tk := ye.GetToken(); tk != nil && tk.Position != nil {
			line, col = tk.Position.Line, tk.Position.Column
		}
	}
	lines := strings.Split(string(data), "\n")
	if line >= 1 && line <= len(lines) {
		if strings.Contains(plainText(lines[line-1]), "::") {
			msg += ` (quote IPv6 addresses inside {...}, as in "::1": YAML reads their colons as key separators)`
		}
	}
	d.errorAt(d.file, line, col, "", msg)
}

// flowDepthLimit bounds nesting before the YAML parser sees the text: its
// memory grows with the square of the nesting depth, and no policy needs
// more than a handful of levels.
const flowDepthLimit = 64

// tooDeep estimates the nesting depth of YAML text: flow brackets, plus
// compact block sequences ("- - - x") and explicit keys on one line. It
// skips quoted strings and comments. It returns the 1-based position where
// the depth first exceeds the limit, or 0, 0.
func tooDeep(data []byte) (line, col int) {
	depth := 0
	line, lineStart := 1, 0
	atLineStart := true // only indentation seen on this line so far
	compact := 0
	prev := byte('\n')
	for i := 0; i < len(data); i++ {
		c := data[i]
		switch {
		case c == '\n':
			line, lineStart, atLineStart, compact = line+1, i+1, true, 0
		case c == '#' && (prev == ' ' || prev == '\t' || prev == '\n'):
			for i+1 < len(data) && data[i+1] != '\n' {
				i++
			}
		case (c == '"' || c == '\'') && strings.IndexByte(" \t\n[{,:-", prev) >= 0:
			for i+1 < len(data) {
				i++
				if data[i] == '\n' {
					line, lineStart = line+1, i+1
				}
				if data[i] == '\\' && c == '"' {
					i++
					continue
				}
				if data[i] == c {
					break
				}
			}
			atLineStart = false
		case (c == '[' || c == '{') && strings.IndexByte(" \t\n[{,:-?", prev) >= 0:
			depth++
			atLineStart = false
		case c == ']' || c == '}':
			depth = max(depth-1, 0)
			atLineStart = false
		case atLineStart && (c == '-' || c == '?') && i+1 < len(data) && (data[i+1] == ' ' || data[i+1] == '\t'):
			compact++
		case c == ' ' || c == '\t':
		default:
			atLineStart = false
		}
		if i < len(data) {
			prev = data[i]
		}
		if depth+compact > flowDepthLimit {
			return line, i - lineStart + 1
		}
	}
	return 0, 0
}

// negatedFlagRE finds a negated TCP flag, the "!" being submatch 1.
var negatedFlagRE = regexp.MustCompile(`(?:^|[\s\[,])(!(?:fin|syn|rst|psh|ack|urg|ece|cwr))\b`)

// unquotedNegation finds a negated TCP flag written without quotes, as in
// [syn, !ack]. YAML reads it as a tag: the parser then fails with a message
// that does not say what to do, or silently builds a different document.
// It returns the 1-based position and the flag, or 0, 0, "".
func unquotedNegation(data []byte) (line, col int, flag string) {
	for i, l := range strings.Split(string(data), "\n") {
		if m := negatedFlagRE.FindStringSubmatchIndex(plainText(l)); m != nil {
			return i + 1, m[2] + 1, l[m[2]:m[3]]
		}
	}
	return 0, 0, ""
}

// plainText blanks out the quoted strings and the comment of one line of
// YAML, keeping the columns of everything else.
func plainText(line string) string {
	b := []byte(line)
	var quote byte
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
			b[i] = ' '
		case c == '#' && (i == 0 || b[i-1] == ' ' || b[i-1] == '\t'):
			return string(b[:i])
		case (c == '"' || c == '\'') && (i == 0 || strings.IndexByte(" \t[{,:", b[i-1]) >= 0):
			quote = c
			b[i] = ' '
		}
	}
	return string(b)
}
