// SPDX-License-Identifier: Apache-2.0

package crowdsec

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestReadKeyFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		return p
	}
	key, err := ReadKeyFile(write("ok", "  bb6b576b8ca0add327cf588cdba96d33\n", 0o600))
	if err != nil || key != "bb6b576b8ca0add327cf588cdba96d33" {
		t.Fatalf("%q %v", key, err)
	}
	if key, err := ReadKeyFile(write("ro", "k\n", 0o400)); err != nil || key != "k" {
		t.Fatalf("owner-only read: %q %v", key, err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct{ path, want string }{
		"group":     {write("g", "k\n", 0o640), "readable by group or others (mode 0640): chmod 600"},
		"world":     {write("w", "k\n", 0o604), "readable by group or others (mode 0604)"},
		"empty":     {write("e", " \n\t\n", 0o600), "is empty"},
		"two words": {write("two", "k1 k2\n", 0o600), "more than one word"},
		"two lines": {write("lines", "k1\nk2\n", 0o600), "more than one word"},
		"huge":      {write("huge", strings.Repeat("k", 5000), 0o600), "larger than"},
		"missing":   {filepath.Join(dir, "nope"), "no such file"},
		"directory": {dir, "not a regular file"},
		"fifo":      {fifo, "not a regular file"},
	} {
		_, err := ReadKeyFile(c.path)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}
