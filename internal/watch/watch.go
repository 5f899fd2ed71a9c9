// SPDX-License-Identifier: Apache-2.0

// Package watch tells a long-running process when a configuration file, or
// a file it names, has changed content. Production uses it: attach reloads
// its policy when the policy or a list file changes.
//
// Editors and deployment tools rarely write a file in place: they write a
// temporary file and rename it over the original (most editors, vim with its
// backup-and-rename), or swap a symlink to a new directory (Kubernetes
// ConfigMap volumes). A watch on the file itself follows the old inode and
// goes silent after the first such save, so a Watcher watches the
// directories instead and keeps the entries that matter: the file's name,
// and every symlink passed while resolving it, re-resolved after each
// change. Bursts of events are debounced, a change is reported only when
// the files' contents differ from the last ones reported, and, with a
// settle interval, only once the files have stayed the same across it: a
// file written in place by a slow writer is not reported half-written.
package watch

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/xdplimit/xdplimit/internal/fileutil"
)

// DefaultDebounce is how long the files must stay quiet before they are
// compared. One save is a handful of events within a few milliseconds
// (create, write, chmod, rename); 200 ms makes them one change while an
// operator still sees the reload as immediate.
const DefaultDebounce = 200 * time.Millisecond

// Options configure a Watcher.
type Options struct {
	// Debounce: DefaultDebounce when 0.
	Debounce time.Duration
	// Settle, when set, is how long the files' sizes, modification times
	// and contents must stay the same before a change is reported: they
	// are read once the events have stopped, and again Settle later, until
	// two reads agree. Without it the first read after the events counts.
	Settle time.Duration
	// Related returns the other files whose contents count as part of the
	// main file (a policy's list files), given the main file's path and
	// current contents. It is called again after every change, so a file
	// newly named is watched from then on. Nil: only the main file.
	Related func(path string, data []byte) []string
	// Log receives what the watcher decided and why; nil discards it.
	Log *slog.Logger
}

// Watcher reports changes in the contents of a file and its related files.
type Watcher struct {
	path string
	opts Options
	log  *slog.Logger
	fs   *fsnotify.Watcher
	c    chan struct{}
	done chan struct{}
	quit chan struct{}

	// Owned by run once New returns.
	related []string
	dirs    map[string]map[string]bool // watched real directory → names that matter in it
	last    [sha256.Size]byte          // digest of the contents last reported (or found at start)
	missing string                     // a watched file found missing at the last check, logged once
	settled [sha256.Size]byte          // with Settle: the digest (stat included) read at the last check
}

// New starts watching path (made absolute) and the files opts.Related
// names. The contents found now are the baseline: Changes reports only
// contents that differ from it. Watching starts before the baseline is read,
// so an edit made right after New returns, or while it runs, is not missed.
func New(path string, opts Options) (*Watcher, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	if opts.Debounce <= 0 {
		opts.Debounce = DefaultDebounce
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	fs, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watching %s: %w", abs, err)
	}
	w := &Watcher{
		path: abs, opts: opts, log: log, fs: fs,
		c: make(chan struct{}, 1), done: make(chan struct{}), quit: make(chan struct{}),
		dirs: map[string]map[string]bool{},
	}
	w.refreshRelated()
	w.sync()
	if _, ok := w.dirs[realDir(filepath.Dir(abs))]; !ok {
		fs.Close()
		return nil, fmt.Errorf("cannot watch the directory of %s", abs)
	}
	w.last, _ = w.digest()
	go w.run()
	return w, nil
}

// Changes receives a value when the watched contents have changed. Changes
// that come while the previous one is unread merge into it: whoever reads
// the channel then reads the files, and so sees the latest contents.
func (w *Watcher) Changes() <-chan struct{} { return w.c }

// Close stops watching. Changes is not closed, so a select on it after
// Close blocks rather than spins.
func (w *Watcher) Close() error {
	select {
	case <-w.quit:
	default:
		close(w.quit)
	}
	<-w.done
	return w.fs.Close()
}

func (w *Watcher) run() {
	defer close(w.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-w.quit:
			timer.Stop()
			return
		case ev, ok := <-w.fs.Events:
			if !ok {
				return
			}
			if w.matters(ev.Name) {
				w.log.Debug("watched file event", "event", ev.String())
				timer.Reset(w.opts.Debounce)
			}
		case err, ok := <-w.fs.Errors:
			if !ok {
				return
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				// Events were lost: compare contents, which is what
				// the lost events would have led to.
				timer.Reset(w.opts.Debounce)
			}
			w.log.Warn("file watch", "err", err)
		case <-timer.C:
			w.check(timer)
		}
	}
}

// matters: an event on a name that takes part in resolving a watched file,
// or on a watched directory itself (removed or moved away).
func (w *Watcher) matters(name string) bool {
	if _, ok := w.dirs[name]; ok {
		return true
	}
	return w.dirs[filepath.Dir(name)][filepath.Base(name)]
}

// check runs once events have stopped for the debounce interval (or the
// settle interval has passed); it re-arms timer to look again.
func (w *Watcher) check(timer *time.Timer) {
	w.refreshRelated()
	// Watch new directories (a swapped symlink now points elsewhere)
	// before reading, so a write that races this check gives an event.
	w.sync()
	sum, missing := w.digest()
	if missing != "" {
		// Mid-replace (deleted, not yet recreated), or a file the policy
		// newly names that is still to be written: reloading now could
		// only fail. The next event on it comes back here.
		if missing != w.missing {
			w.log.Warn("watched file is missing; waiting for it before reloading", "file", missing)
		}
		w.missing = missing
		return
	}
	w.missing = ""
	if w.opts.Settle > 0 {
		// The same contents, sizes and times across the interval: the
		// writer is done. Else look again after it.
		stamp := w.stamp(sum)
		if stamp != w.settled {
			w.settled = stamp
			timer.Reset(w.opts.Settle)
			return
		}
		w.settled = [sha256.Size]byte{}
	}
	if sum == w.last {
		w.log.Debug("watched files changed on disk but not in content; nothing to reload",
			"sha256", hex.EncodeToString(sum[:8]))
		return
	}
	w.last = sum
	select {
	case w.c <- struct{}{}:
	default: // one already pending
	}
}

// stamp adds the files' sizes and modification times to their contents'
// digest.
func (w *Watcher) stamp(sum [sha256.Size]byte) [sha256.Size]byte {
	h := sha256.New()
	h.Write(sum[:])
	for _, f := range w.files() {
		var b [16]byte
		if fi, err := os.Stat(f); err == nil {
			binary.LittleEndian.PutUint64(b[:8], uint64(fi.Size()))
			binary.LittleEndian.PutUint64(b[8:], uint64(fi.ModTime().UnixNano()))
		}
		h.Write(b[:])
	}
	var out [sha256.Size]byte
	copy(out[:], h.Sum(nil))
	return out
}

// files lists the main file and its related files.
func (w *Watcher) files() []string {
	return append([]string{w.path}, w.related...)
}

// refreshRelated asks Related which files the main file names now. While
// the main file cannot be read the previous list stands.
func (w *Watcher) refreshRelated() {
	if w.opts.Related == nil {
		return
	}
	data, err := fileutil.ReadRegular(w.path, maxWatched)
	if err != nil {
		return
	}
	var rel []string
	for _, p := range w.opts.Related(w.path, data) {
		if p, err := filepath.Abs(p); err == nil && p != w.path {
			rel = append(rel, p)
		}
	}
	w.related = rel
}

// sync makes the watched directories those the files resolve through.
func (w *Watcher) sync() {
	want := map[string]map[string]bool{}
	add := func(path string) {
		dir := realDir(filepath.Dir(path))
		if dir == "" {
			return // the directory does not exist (yet)
		}
		if want[dir] == nil {
			want[dir] = map[string]bool{}
		}
		want[dir][filepath.Base(path)] = true
	}
	for _, f := range w.files() {
		add(f)
		final, links := resolve(f)
		for _, l := range links {
			add(l)
		}
		add(final)
	}
	for dir := range want {
		// Add is idempotent, and re-adds a directory that was removed
		// and recreated (the kernel drops the watch of a removed one).
		if err := w.fs.Add(dir); err != nil {
			w.log.Debug("cannot watch directory", "dir", dir, "err", err)
			delete(want, dir)
		}
	}
	for dir := range w.dirs {
		if _, ok := want[dir]; !ok {
			_ = w.fs.Remove(dir) // fails harmlessly when the kernel already dropped it
		}
	}
	w.dirs = want
}

// digest hashes the contents of the main and related files, in order, and
// names the first one missing. A file that exists but cannot be read (not a
// regular file, no permission) is hashed as its error, so that fixing it is
// a change, and the reload that follows reports what is wrong.
func (w *Watcher) digest() (sum [sha256.Size]byte, missing string) {
	h := sha256.New()
	for _, f := range w.files() {
		writeField(h, []byte(f))
		data, err := fileutil.ReadRegular(f, maxWatched)
		switch {
		case errors.Is(err, os.ErrNotExist):
			if missing == "" {
				missing = f
			}
			writeField(h, []byte("missing"))
		case err != nil:
			writeField(h, []byte("error: "+err.Error()))
		default:
			writeField(h, data)
		}
	}
	copy(sum[:], h.Sum(nil))
	return sum, missing
}

// writeField writes a length-prefixed field, so that no two file lists
// hash alike by shifting bytes between names and contents.
func writeField(h hash.Hash, b []byte) {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(b)))
	h.Write(n[:])
	h.Write(b)
}

// realDir resolves a directory's symlinks, so that one directory reached by
// two paths is watched once and its events are matched under one name; ""
// when it does not exist.
func realDir(dir string) string {
	r, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return ""
	}
	return r
}

// maxWatched bounds what the watcher reads of one file to hash it: more
// than any policy or list file the loader accepts.
const maxWatched = 128 << 20

// maxLinks bounds symlink resolution, as the kernel's ELOOP does.
const maxLinks = 40

// resolve follows the symlinks of an absolute, clean path component by
// component, and returns where it ends and every symlink passed on the way
// (a link in a directory component too, such as the ..data link of a
// Kubernetes volume). A missing component ends the walk: the rest of the
// path is kept as written.
func resolve(path string) (final string, links []string) {
	final = filepath.Clean(path)
	for len(links) < maxLinks {
		parts := strings.Split(strings.TrimPrefix(final, "/"), "/")
		cur, swapped := "/", false
		for i, part := range parts {
			next := filepath.Join(cur, part)
			fi, err := os.Lstat(next)
			if err != nil {
				return final, links
			}
			if fi.Mode()&os.ModeSymlink == 0 {
				cur = next
				continue
			}
			target, err := os.Readlink(next)
			if err != nil {
				return final, links
			}
			links = append(links, next)
			if !filepath.IsAbs(target) {
				target = filepath.Join(cur, target)
			}
			final = filepath.Join(append([]string{target}, parts[i+1:]...)...)
			swapped = true
			break
		}
		if !swapped {
			return final, links
		}
	}
	return final, links
}
