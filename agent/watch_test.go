// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// watchPolicy watches the list files the policy names: a change in one is
// a change, and so is naming a new one once it exists.
func TestWatchPolicyListFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		tmp := filepath.Join(dir, "."+name+".tmp")
		if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	policy := func(lists ...string) string {
		s := "deny:\n  files: ["
		for i, l := range lists {
			if i > 0 {
				s += ", "
			}
			s += l
		}
		return s + "]\nrules: []\n"
	}
	write("deny.netset", "198.51.100.0/24\n")
	write("p.yaml", policy("deny.netset"))
	var logs bytes.Buffer
	changes, stop := watchPolicy(filepath.Join(dir, "p.yaml"), slog.New(slog.NewTextHandler(&logs, nil)))
	defer stop()
	if changes == nil {
		t.Fatalf("not watching: %s", logs.String())
	}
	expect := func(what string, want bool) {
		t.Helper()
		select {
		case <-changes:
			if !want {
				t.Fatalf("%s: reported a change", what)
			}
		case <-time.After(time.Second):
			if want {
				t.Fatalf("%s: no change reported", what)
			}
		}
	}
	write("deny.netset", "198.51.100.0/24\n203.0.113.0/24\n")
	expect("list file replaced", true)
	write("other.netset", "192.0.2.0/24\n")
	expect("a file the policy does not name", false)
	write("p.yaml", policy("deny.netset", "other.netset"))
	expect("policy names another list", true)
	write("other.netset", "192.0.2.0/25\n")
	expect("the newly named list replaced", true)
}

// A directory that cannot be watched is a warning: SIGHUP still works.
func TestWatchPolicyUnwatchable(t *testing.T) {
	var logs bytes.Buffer
	changes, stop := watchPolicy(filepath.Join(t.TempDir(), "gone", "p.yaml"), slog.New(slog.NewTextHandler(&logs, nil)))
	defer stop()
	if changes != nil {
		t.Fatal("watching a directory that does not exist")
	}
	if !bytes.Contains(logs.Bytes(), []byte("not watching the policy file")) {
		t.Errorf("no warning: %s", logs.String())
	}
}
