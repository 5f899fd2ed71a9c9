// SPDX-License-Identifier: Apache-2.0

package loader

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/xdplimit/xdplimit/maps"
)

// resizeLogs drops the pinned sliding_log table from opts.Pinned when the
// policy img needs another: a table for its first sliding_log level, or
// none when no level is left, and sizes the new one. A table in use keeps
// its size and its logs. It reports whether the table is replaced.
func resizeLogs(opts *maps.Options, img *maps.Image) bool {
	logs, src := opts.Pinned[maps.LogsMap], opts.Pinned[maps.Sources4Map]
	if logs == nil || src == nil {
		return false
	}
	want := maps.LogsFor(img, maps.Capacity4(src))
	if have := logs.MaxEntries(); (want > maps.UnusedLogs) == (have > maps.UnusedLogs) {
		return false
	}
	// Nothing refers to the old table's logs: no level was a sliding_log,
	// or none is now.
	delete(opts.Pinned, maps.LogsMap)
	logs.Close()
	opts.MaxLogs = want
	return true
}

// repin pins the limiter's map name in place of the pinned one, with one
// rename: the pin directory never lacks it.
func (a *Attachment) repin(name string) error {
	defer os.Remove(stagingRoot) // after tmp's removal: when no other attach stages
	tmp, err := a.stagingDir()
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	staged := filepath.Join(tmp, name)
	if err := a.Limiter.Map(name).Pin(staged); err != nil {
		return err
	}
	if err := os.Rename(staged, filepath.Join(a.dir, name)); err != nil {
		return fmt.Errorf("replacing the pin of %s: %w", name, err)
	}
	return nil
}
