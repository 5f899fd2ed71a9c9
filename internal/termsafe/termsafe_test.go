// SPDX-License-Identifier: Apache-2.0

package termsafe

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestEscape(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"scanner", "scanner"},
		{"", ""},
		{`C:\path "quoted"`, `C:\path "quoted"`},
		{"naïve 日本 ✓", "naïve 日本 ✓"},
		// Retitle the terminal, then clear it.
		{"\x1b]0;pwned\x07\x1b[2J", `\x1b]0;pwned\x07\x1b[2J`},
		{"a\tb\nc\rd", `a\tb\nc\rd`},
		{"del\x7f", `del\x7f`},
		{"c1 \u0085 \u009b", `c1 \u0085 \u009b`},
		// Bidi override and isolate, zero-width space, line separator.
		{"evil\u202etxt.exe \u2066x\u2069", `evil\u202etxt.exe \u2066x\u2069`},
		{"zw\u200bsp\u2028", `zw\u200bsp\u2028`},
		{"bad \xff\xfe utf8 \xe2\x82", `bad \xff\xfe utf8 \xe2\x82`},
		{"nul\x00", `nul\x00`},
		{"nbsp\u00a0", `nbsp\u00a0`},
	} {
		if got := Escape(c.in); got != c.want {
			t.Errorf("Escape(%q) = %q, want %q", c.in, got, c.want)
		}
		if Clean(c.in) != (c.in == c.want) {
			t.Errorf("Clean(%q) = %v", c.in, Clean(c.in))
		}
	}
}

func TestClip(t *testing.T) {
	for _, c := range []struct {
		in   string
		max  int
		want string
	}{
		{"scanner", 64, "scanner"},
		{"scanner", 4, "scan"},
		{"ab\x1bcd", 4, "ab"},      // \x1b does not fit: not cut in half
		{"ab\x1bcd", 6, `ab\x1b`},  //
		{"日本語", 7, "日本"},           // a rune is never split
		{"a\u202eb", 7, `a\u202e`}, // 1 + 6 bytes
		{strings.Repeat("\x07", 20), 10, `\x07\x07`},
	} {
		if got := Clip(c.in, c.max); got != c.want {
			t.Errorf("Clip(%q, %d) = %q, want %q", c.in, c.max, got, c.want)
		}
	}
}

// FuzzEscape: whatever the input, the output is valid UTF-8 with no
// character a terminal acts on, Escape is idempotent, and Clip is a prefix
// of Escape within its bound.
func FuzzEscape(f *testing.F) {
	for _, s := range []string{
		"", "scanner", "\x1b]0;title\x07\x1b[2J", "\x1b[31mred\x1b[0m", "a\nforged line",
		"\u202eevil", "\xff\xfe", "\xc2\x85", "\u2066\u2069", "\\x1b", "\x9b2J", strings.Repeat("é", 40),
	} {
		f.Add(s, 63)
	}
	f.Fuzz(func(t *testing.T, s string, max int) {
		e := Escape(s)
		checkSafe(t, e)
		if Escape(e) != e || !Clean(e) {
			t.Fatalf("Escape not idempotent: %q -> %q -> %q", s, e, Escape(e))
		}
		if Clean(s) != (e == s) {
			t.Fatalf("Clean(%q) = %v, Escape changed it: %v", s, Clean(s), e != s)
		}
		max = max & 0x3ff
		c := Clip(s, max)
		checkSafe(t, c)
		if len(c) > max || !strings.HasPrefix(e, c) {
			t.Fatalf("Clip(%q, %d) = %q: not a prefix of %q within the bound", s, max, c, e)
		}
	})
}

func checkSafe(t *testing.T, s string) {
	t.Helper()
	if !utf8.ValidString(s) {
		t.Fatalf("%q: invalid UTF-8", s)
	}
	for _, r := range s {
		if r < 0x20 || r >= 0x7f && r <= 0x9f || r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069 ||
			r == 0x2028 || r == 0x2029 || r == 0x200b || r == 0xfeff {
			t.Fatalf("%q holds %U", s, r)
		}
	}
}

// JSON output stays the same JSON, without the characters encoding/json
// leaves raw.
func TestJSON(t *testing.T) {
	in := []string{"scanner", "\x1b]0;x\x07", "del\x7f c1\u009b bidi\u202e tag\U000e0001 \u2028", "日本\n\t"}
	raw, err := json.MarshalIndent(in, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got := JSON(raw)
	var back []string
	if err := json.Unmarshal(got, &back); err != nil || strings.Join(back, "|") != strings.Join(in, "|") {
		t.Fatalf("%s decodes to %q (%v), want %q", got, back, err, in)
	}
	checkSafe(t, strings.NewReplacer("\n", "", "\t", "").Replace(string(got)))
	if !strings.Contains(string(got), `\u009b`) || !strings.Contains(string(got), `\udb40\udc01`) {
		t.Fatalf("not escaped: %s", got)
	}
	if ok := []byte("[\n  \"plain\"\n]"); string(JSON(ok)) != string(ok) {
		t.Fatal("clean JSON changed")
	}
}

func TestEscapeLines(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"p.yaml:2:11: one\np.yaml:3:1: two", "p.yaml:2:11: one\np.yaml:3:1: two"},
		{"one\x1b[2J\ntwo\r\tthree\x07", "one\\x1b[2J\ntwo\\r\\tthree\\x07"},
		{"\n\n", "\n\n"},
	} {
		if got := EscapeLines(c.in); got != c.want {
			t.Errorf("EscapeLines(%q) = %q, want %q", c.in, got, c.want)
		}
		if got := EscapeLines(EscapeLines(c.in)); got != EscapeLines(c.in) {
			t.Errorf("EscapeLines is not idempotent on %q: %q", c.in, got)
		}
	}
}
