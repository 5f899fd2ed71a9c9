// SPDX-License-Identifier: Apache-2.0

package loader

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestInterfaceLock: one control plane per interface, and releasing the
// lock leaves no file behind. A process that opened the file just before
// it was removed locks an orphan that no later locker sees.
func TestInterfaceLock(t *testing.T) {
	old := lockDir
	lockDir = t.TempDir()
	t.Cleanup(func() { lockDir = old })
	path := filepath.Join(lockDir, "xdpl0.lock")

	a, err := lockInterface("xdpl0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockInterface("xdpl0"); err == nil || !strings.Contains(err.Error(), "another xdplimit process is managing xdpl0") {
		t.Fatalf("second lock: %v, want refused", err)
	}
	other, err := lockInterface("xdpl1")
	if err != nil {
		t.Fatalf("another interface: %v", err)
	}

	racer, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer racer.Close()
	if err := unlockInterface(a); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("lock file after release: %v, want removed", err)
	}
	if err := unix.Flock(int(racer.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatalf("flock on the removed file: %v", err)
	}
	b, err := lockInterface("xdpl0")
	if err != nil {
		t.Fatalf("lock after release, with the orphan held: %v", err)
	}
	var orphan, fresh unix.Stat_t
	if err := unix.Fstat(int(racer.Fd()), &orphan); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fstat(int(b.Fd()), &fresh); err != nil {
		t.Fatal(err)
	}
	if orphan.Ino == fresh.Ino {
		t.Fatal("the new lock is the orphaned file")
	}
	for _, f := range []*os.File{b, other} {
		if err := unlockInterface(f); err != nil {
			t.Fatal(err)
		}
	}
	if ents, _ := os.ReadDir(lockDir); len(ents) != 0 {
		t.Errorf("%d files left in the lock directory", len(ents))
	}
}
