// SPDX-License-Identifier: Apache-2.0

package loader

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// lockDir holds the per-interface lock files.
var lockDir = "/run/xdplimit"

// RunDir is the directory of the per-interface run-time files (lock files,
// the fleet status a running attach writes).
func RunDir() string { return lockDir }

// lockInterface serialises control planes for one interface: an attach,
// reload or detach at a time. The lock is an flock on <lockDir>/<iface>.lock.
// unlockInterface removes the file while still holding it, so the directory
// does not keep a file for every interface name ever managed; a process that
// opened the file just before it went then holds a lock nobody else can
// find, sees that the path no longer names its file, and starts over.
func lockInterface(iface string) (*os.File, error) {
	if err := os.MkdirAll(lockDir, 0o700); err != nil {
		return nil, err
	}
	path := filepath.Join(lockDir, iface+".lock")
	for try := 0; ; try++ {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return nil, err
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			return nil, fmt.Errorf("another xdplimit process is managing %s (lock %s held)", iface, path)
		}
		var held, named unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &held); err != nil {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if err := unix.Stat(path, &named); err == nil && named.Dev == held.Dev && named.Ino == held.Ino {
			return f, nil
		}
		f.Close()
		if try == 10 {
			return nil, fmt.Errorf("lock %s keeps being replaced under us", path)
		}
	}
}

// unlockInterface releases an interface's lock and removes its file.
func unlockInterface(f *os.File) error {
	// Removed before the close, while held: see lockInterface.
	err := os.Remove(f.Name())
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	return errors.Join(err, f.Close())
}

// Lock is an interface's lock held by a control plane that takes it before
// attaching (an agent that serves its control socket while it waits for
// the interface): given in Config.Lock, it passes to the Attachment, whose
// Close or Detach releases it.
type Lock struct{ f *os.File }

// LockInterface takes iface's lock (see lockInterface); it fails at once
// when another xdplimit process holds it.
func LockInterface(iface string) (*Lock, error) {
	if err := CheckInterfaceName(iface); err != nil {
		return nil, err
	}
	f, err := lockInterface(iface)
	if err != nil {
		return nil, err
	}
	return &Lock{f: f}, nil
}

// Unlock releases the lock. It is for a Lock that never reached an
// Attachment: Attach releases a Config.Lock only through the Attachment.
func (l *Lock) Unlock() error { return unlockInterface(l.f) }
