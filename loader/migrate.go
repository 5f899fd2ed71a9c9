// SPDX-License-Identifier: Apache-2.0

package loader

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/maps"
)

// Migration describes the pinned limiter of another map layout that an
// attach replaced: its bans went into new maps, the new program replaced
// the old one in the pinned link, and the new maps replaced the old pins.
type Migration struct {
	From uint32 // the pinned limiter's map layout
	Bans int    // bans in force carried over
}

// loadPinnedMaps opens every map of this layout pinned in dir; complete
// is false when some are missing (pins of another layout).
func loadPinnedMaps(dir string) (pinned map[string]*ebpf.Map, complete bool) {
	pinned, complete = map[string]*ebpf.Map{}, true
	for _, name := range maps.MapNames {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), nil)
		if err != nil {
			complete = false
			continue
		}
		pinned[name] = m
	}
	return pinned, complete
}

// migrate replaces a running limiter of another map layout without a gap:
// new maps sized as the pinned ones, with the policy and the old bans
// written in, are pinned in a staging directory; one atomic update of the
// pinned link puts the new program in place of the old one; then the new
// pins replace the old directory. Until the link update, nothing the old
// limiter has is touched: any failure up to there leaves it enforcing as
// it was, and the error says what to do. Every source's state and the
// counters start afresh.
func (a *Attachment) migrate(cfg Config, lk link.Link, pinned map[string]*ebpf.Map, from uint32) (err error) {
	fail := func(err error) error {
		return fmt.Errorf("%s is enforced by an xdplimit of map layout %d, this one uses layout %d, and carrying "+
			"its state over failed: %w. The running limiter is unchanged and keeps enforcing. Either run the xdplimit "+
			"that attached it (`xdplimit version` prints its map layout), or run `xdplimit detach %[1]s` and attach "+
			"again, which leaves %[1]s unprotected in between and starts every source's state and ban afresh",
			a.Interface, from, maps.LayoutVersion, err)
	}
	c, err := maps.ReadCarried(pinned)
	if err != nil {
		return fail(err)
	}
	if ino, _ := NetnsInode(); c.NetnsIno != 0 && ino != c.NetnsIno {
		return fmt.Errorf("%s holds the state of an interface %s in another network namespace", a.dir, a.Interface)
	}
	opts := maps.SizesOf(pinned)
	opts.Clock = cfg.Clock
	if opts.MaxSources == 0 {
		opts.MaxSources, opts.MaxOtherSources = cfg.MaxSources, cfg.MaxOtherSources
	}
	if opts.MaxBans == 0 {
		opts.MaxBans = cfg.MaxBans
	}
	// Every log starts afresh here: the sliding_log table is sized for the
	// policy, as a new attach sizes it.
	opts.MaxLogs = maps.LogsFor(cfg.Policy.Image, opts.MaxSources)
	l, err := maps.Load(opts)
	if err != nil {
		return fail(err)
	}
	a.Limiter, a.Mode = l, Mode(c.AttachMode)
	linked := false
	defer func() {
		if !linked {
			l.Close()
			a.Limiter = nil
		}
	}()
	if err := l.Apply(cfg.Policy.Image); err != nil {
		return fail(err)
	}
	bans, err := l.Restore(c)
	if err != nil {
		return fail(fmt.Errorf("carrying the bans over: %w", err))
	}
	m, err := l.Meta()
	if err != nil {
		return fail(err)
	}
	m.AttachMode, m.Attached = c.AttachMode, c.Attached
	if err := l.SetMeta(m); err != nil {
		return fail(err)
	}
	if err := a.recordMeta(cfg, false); err != nil {
		return fail(err)
	}
	staged, err := a.stage(false)
	if err != nil {
		return fail(err)
	}
	if err := syncEgress(a.Ifindex, l, cfg.Policy.Image.Conversations.Reflection.On); err != nil {
		return fail(err)
	}
	if err := lk.Update(l.Program()); err != nil {
		os.RemoveAll(staged)
		os.Remove(stagingRoot)
		return fail(fmt.Errorf("replacing the program in the pinned link: %w", err))
	}
	// The new program enforces from here on: what follows only moves pins.
	linked = true
	a.link, a.Adopted, a.Migrated = lk, true, &Migration{From: from, Bans: bans}
	if err := a.swapPins(staged); err != nil {
		return fmt.Errorf("%s: the new program enforces, but its pins could not replace the old ones (%w): "+
			"run `xdplimit detach %[1]s` and attach again", a.Interface, err)
	}
	return nil
}

// swapPins moves the pinned link into staged, which holds the new maps,
// and puts staged in place of the interface's pin directory, whose old
// maps are then unpinned. An exchange does it in one step where bpffs
// allows it; else two renames, between which the directory is briefly
// missing (readers such as `xdplimit status` retry; the interface's lock
// keeps other control planes out).
func (a *Attachment) swapPins(staged string) error {
	if err := a.link.Pin(filepath.Join(staged, "link")); err != nil {
		return err
	}
	err := unix.Renameat2(unix.AT_FDCWD, staged, unix.AT_FDCWD, a.dir, unix.RENAME_EXCHANGE)
	if err == nil {
		defer os.Remove(stagingRoot)
		return os.RemoveAll(staged) // now the old directory
	}
	if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOSYS) {
		return err
	}
	old := staged + "-old"
	if err := os.Rename(a.dir, old); err != nil {
		return err
	}
	if err := os.Rename(staged, a.dir); err != nil {
		return err
	}
	defer os.Remove(stagingRoot)
	return os.RemoveAll(old)
}
