// SPDX-License-Identifier: Apache-2.0

package loader

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/xdplimit/xdplimit/maps"
)

// Pinning: the link and the maps pinned into a staging directory and
// renamed into place, so that a failure never leaves a half-populated pin
// directory, and every pin removed on detach.

// pin pins the link and maps into a staging directory and renames it into
// place, so that a failure never leaves a half-populated pin directory.
func (a *Attachment) pin() error {
	tmp, err := a.stage(true)
	if err != nil {
		return err
	}
	// Pin paths recorded in the objects are now the temporary ones; the
	// rename moves them all at once.
	if err := renameIntoRoot(tmp, a.dir); err != nil {
		a.link.Unpin()
		os.RemoveAll(tmp)
		return fmt.Errorf("pinning under %s: %w", PinRoot, err)
	}
	_ = os.Remove(stagingRoot)
	return nil
}

// stagingDir makes a new, empty directory under stagingRoot for pins to be
// moved in place with a rename. bpffs refuses names with a dot, so the
// staging directory is a sibling of the pin root rather than a hidden
// entry in it.
func (a *Attachment) stagingDir() (string, error) {
	for try := 0; ; try++ {
		for _, d := range []string{PinRoot, stagingRoot} {
			if err := os.MkdirAll(d, 0o700); err != nil {
				return "", err
			}
		}
		dir, err := os.MkdirTemp(stagingRoot, a.Interface+"-")
		if err == nil || !errors.Is(err, fs.ErrNotExist) || try == rootTries {
			return dir, err
		}
	}
}

// rootTries bounds the retries of a pin step whose root another
// interface's detach removed meanwhile (it removes the roots when empty).
const rootTries = 3

// renameIntoRoot renames the staging directory tmp to dir, making the pin
// root again if another interface's detach removed it since it was made.
func renameIntoRoot(tmp, dir string) error {
	for try := 0; ; try++ {
		err := os.Rename(tmp, dir)
		if err == nil || !errors.Is(err, fs.ErrNotExist) || try == rootTries {
			return err
		}
		if _, serr := os.Stat(tmp); serr != nil {
			return err // the staging directory itself is gone
		}
		if merr := os.MkdirAll(PinRoot, 0o700); merr != nil {
			return err
		}
	}
}

// stage pins the maps, and with withLink the link, into a new directory
// under stagingRoot and returns it; on error nothing stays pinned there.
func (a *Attachment) stage(withLink bool) (string, error) {
	tmp, err := a.stagingDir()
	if err != nil {
		return "", err
	}
	fail := func(err error) (string, error) {
		if withLink {
			a.link.Unpin()
		}
		os.RemoveAll(tmp)
		return "", fmt.Errorf("pinning under %s: %w", PinRoot, err)
	}
	if withLink {
		if err := a.link.Pin(filepath.Join(tmp, "link")); err != nil {
			return fail(err)
		}
	}
	for _, name := range maps.MapNames {
		if err := a.Limiter.Map(name).Pin(filepath.Join(tmp, name)); err != nil {
			return fail(err)
		}
	}
	return tmp, nil
}

func removePins(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing pins in %s: %w", dir, err)
	}
	// The roots go when empty; other interfaces keep them.
	_ = os.Remove(PinRoot)
	_ = os.Remove(stagingRoot)
	return nil
}
