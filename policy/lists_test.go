// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// writeFiles creates files in a new directory and returns its path.
func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, text := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestListFiles(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"p.yaml": `allow:
  cidrs: [192.0.2.0/24]
  files: [lists/allow.netset]
deny:
  files: [deny.netset]
rules: []
`,
		"lists/allow.netset": "# FireHOL style\n\n198.51.100.0/24\n2001:db8::/32   # trailing comment\r\n192.0.2.0/24\n",
		"deny.netset":        "; Spamhaus style\n203.0.113.0/24 ; SBL1\n  10.0.0.0/8\n",
	})
	p, err := Load(filepath.Join(dir, "p.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := p.Allow, pfx("192.0.2.0/24", "198.51.100.0/24", "2001:db8::/32"); !reflect.DeepEqual(got, want) {
		t.Errorf("allow %v, want %v", got, want)
	}
	if got, want := p.Deny, pfx("10.0.0.0/8", "203.0.113.0/24"); !reflect.DeepEqual(got, want) {
		t.Errorf("deny %v, want %v", got, want)
	}
	if len(p.Warnings) != 0 {
		t.Errorf("warnings: %v", p.Warnings)
	}
	if got, want := p.ListFiles, []string{filepath.Join(dir, "lists/allow.netset"), filepath.Join(dir, "deny.netset")}; !reflect.DeepEqual(got, want) {
		t.Errorf("list files %q, want %q", got, want)
	}
}

// NamedListFiles names the list files of a policy that does not load: a
// watcher must know them to notice when a missing one appears.
func TestNamedListFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p.yaml")
	src := []byte(`allow:
  files: [a.netset, /abs/b.netset]
deny:
  files: [a.netset, sub/c.netset]
rules:
  - name: r
    limit: {algorithm: token_bucket, rate: 10/sec, burst: 1}
`)
	if _, err := Parse(path, src); err == nil {
		t.Fatal("the policy loaded; the test needs one with errors")
	}
	want := []string{filepath.Join(dir, "a.netset"), "/abs/b.netset", filepath.Join(dir, "sub/c.netset")}
	if got := NamedListFiles(path, src); !reflect.DeepEqual(got, want) {
		t.Errorf("named list files %q, want %q", got, want)
	}
	if got := NamedListFiles(path, []byte("rules: [")); len(got) != 0 {
		t.Errorf("a policy that does not parse names %q", got)
	}
}

func TestListFileErrors(t *testing.T) {
	many := strings.Repeat("bad\n", maxListProblems+3)
	dir := writeFiles(t, map[string]string{
		"bad.netset":   "10.0.0.0/8\n\n  not-an-address # why\n192.0.2.1/24\n10.1.0.0/16\n",
		"many.netset":  many,
		"deny.netset":  "10.0.0.0/8\n",
		"sub/x.netset": "",
	})
	abs := filepath.Join(dir, "deny.netset")
	src := fmt.Sprintf(`allow:
  files: [bad.netset, missing.netset, sub, many.netset]
deny:
  cidrs: [10.1.0.0/16]
  files: [%q]
rules: []
`, abs)
	path := filepath.Join(dir, "p.yaml")
	_, err := Parse(path, []byte(src))
	bad := filepath.Join(dir, "bad.netset")
	manyPath := filepath.Join(dir, "many.netset")
	want := []string{
		path + `:2:23: allow.files[1]: cannot read list file: open ` + filepath.Join(dir, "missing.netset") + `: no such file or directory`,
		path + `:2:39: allow.files[2]: cannot read list file: ` + filepath.Join(dir, "sub") + ` is not a regular file`,
		path + `:2:44: allow.files[3]: ` + manyPath + ` has 3 more bad lines not shown`,
		path + `:4:11: deny.cidrs[0]: 10.1.0.0/16 is in both allow (` + bad + `:5:1) and deny; remove it from one`,
		bad + `:3:3: allow.files[0]: "not-an-address" is not an IP address or CIDR (like 192.0.2.0/24 or 2001:db8::/32)`,
		abs + `:1:1: deny.files[0]: 10.0.0.0/8 is in both allow (` + bad + `:1:1) and deny; remove it from one`,
	}
	for i := 1; i <= maxListProblems; i++ {
		want = append(want, fmt.Sprintf(`%s:%d:1: allow.files[3]: "bad" is not an IP address or CIDR (like 192.0.2.0/24 or 2001:db8::/32)`, manyPath, i))
	}
	if got := errorLines(err); !reflect.DeepEqual(got, want) {
		t.Fatalf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestListFileWarnings(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"allow.netset": "192.0.2.1/24\n10.1.0.0/16\n",
	})
	path := filepath.Join(dir, "p.yaml")
	p, err := Parse(path, []byte("allow: {files: [allow.netset]}\ndeny: [10.0.0.0/8]\nrules: []\n"))
	if err != nil {
		t.Fatal(err)
	}
	list := filepath.Join(dir, "allow.netset")
	want := []string{
		list + ":1:1: allow.files[0]: 192.0.2.1/24 is masked to 192.0.2.0/24",
		list + ":2:1: allow.files[0]: allow 10.1.0.0/16 is inside deny 10.0.0.0/8 (" + path + ":2:8); the longest prefix decides, so 10.1.0.0/16 is allowed",
	}
	var got []string
	for _, w := range p.Warnings {
		got = append(got, w.String())
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	if !os.IsNotExist(err) {
		t.Fatalf("got %v, want a not-exist error", err)
	}
}

func TestOverlapWarningsCapped(t *testing.T) {
	var deny strings.Builder
	for i := range maxOverlapWarns + 5 {
		fmt.Fprintf(&deny, "10.0.%d.0/24\n", i)
	}
	dir := writeFiles(t, map[string]string{"deny.netset": deny.String()})
	p, err := Parse(filepath.Join(dir, "p.yaml"), []byte("allow: [10.0.0.0/8]\ndeny: {files: [deny.netset]}\nrules: []\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Warnings) != maxOverlapWarns+1 {
		t.Fatalf("%d warnings", len(p.Warnings))
	}
	if got, want := p.Warnings[0].String(), filepath.Join(dir, "p.yaml")+":1:1: 5 more allow/deny overlaps not shown"; got != want {
		t.Fatalf("first warning %q, want %q", got, want)
	}
}
