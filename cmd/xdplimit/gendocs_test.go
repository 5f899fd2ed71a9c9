// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGenDocs: one section-8 page per command an operator can run, none for
// the hidden build step, and completion scripts for the three shells.
func TestGenDocs(t *testing.T) {
	dir := t.TempDir()
	if _, errOut, code := runCLI("gendocs", dir); code != 0 {
		t.Fatalf("gendocs: exit %d: %s", code, errOut)
	}
	for _, page := range []string{"xdplimit.8", "xdplimit-attach.8", "xdplimit-policy-check.8", "xdplimit-version.8", "xdplimit-completion-bash.8"} {
		b, err := os.ReadFile(filepath.Join(dir, "man8", page))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(b), ".nh\n.TH ") || !strings.Contains(string(b), `"8"`) {
			t.Errorf("%s: not a section 8 page:\n%.200s", page, b)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "man8", "xdplimit-gendocs.8")); err == nil {
		t.Error("the hidden gendocs command got a man page")
	}
	for path, want := range map[string]string{
		"bash/xdplimit":      "complete -o default -F __start_xdplimit xdplimit",
		"zsh/_xdplimit":      "#compdef xdplimit",
		"fish/xdplimit.fish": "complete -c xdplimit",
	} {
		b, err := os.ReadFile(filepath.Join(dir, path))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %q", path, want)
		}
	}
}
