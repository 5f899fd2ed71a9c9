// SPDX-License-Identifier: Apache-2.0

package watch

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
)

// Short enough to keep the tests quick, long enough that the events of one
// file operation on a loaded machine fall within it.
const debounce = 50 * time.Millisecond

// includes is a Related for the tests: every line "include NAME" of the
// main file names a file, relative to the main file's directory.
func includes(path string, data []byte) []string {
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		if name, ok := strings.CutPrefix(line, "include "); ok {
			out = append(out, filepath.Join(filepath.Dir(path), name))
		}
	}
	return out
}

func start(t *testing.T, path string) (*Watcher, *testutil.SyncBuffer) {
	t.Helper()
	return startWith(t, path, debounce)
}

func startWith(t *testing.T, path string, debounce time.Duration) (*Watcher, *testutil.SyncBuffer) {
	t.Helper()
	logs := &testutil.SyncBuffer{}
	w, err := New(path, Options{
		Debounce: debounce, Related: includes,
		Log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("watcher log:\n%s", logs)
		}
	})
	return w, logs
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// renameOver replaces path the way most editors save: a temporary file in
// the same directory, renamed over the original.
func renameOver(t *testing.T, path, text string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	write(t, tmp, text)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// expectChange waits for one change report.
func expectChange(t *testing.T, w *Watcher, what string) {
	t.Helper()
	select {
	case <-w.Changes():
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: no change reported", what)
	}
}

// expectQuiet requires no change report within a few debounce intervals.
func expectQuiet(t *testing.T, w *Watcher, what string) {
	t.Helper()
	select {
	case <-w.Changes():
		t.Fatalf("%s: a change was reported", what)
	case <-time.After(6 * debounce):
	}
}

func TestWriteInPlace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.yaml")
	write(t, path, "a")
	w, _ := start(t, path)
	write(t, path, "b")
	expectChange(t, w, "write in place")
	expectQuiet(t, w, "after the write")
}

func TestRenameOver(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.yaml")
	write(t, path, "a")
	w, _ := start(t, path)
	for i, text := range []string{"b", "c", "d"} {
		// A watch on the file's inode would see only the first save.
		renameOver(t, path, text)
		expectChange(t, w, "rename-over "+string(rune('1'+i)))
	}
	expectQuiet(t, w, "after the saves")
}

// vim with backupcopy=no: the original is renamed to the backup name, the
// new contents written under the original name, the backup removed; vim
// also probes the directory with a file named 4913.
func TestVimBackupAndRename(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p.yaml")
	write(t, path, "a")
	w, _ := start(t, path)
	write(t, filepath.Join(dir, "4913"), "")
	os.Remove(filepath.Join(dir, "4913"))
	if err := os.Rename(path, path+"~"); err != nil {
		t.Fatal(err)
	}
	write(t, path, "b")
	os.Remove(path + "~")
	expectChange(t, w, "vim save")
	expectQuiet(t, w, "after the save")
}

// Many events within the debounce interval are one change, even when
// together they last longer than it.
func TestDebounce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.yaml")
	write(t, path, "a")
	// Longer than the other tests' interval, ten writes a tenth of it
	// apart. A loaded machine can hold the writer back for longer than the
	// interval, and then two changes are right: the writes' real spacing
	// is measured, and each gap of the interval or more allows one more
	// report.
	const long = 300 * time.Millisecond
	w, logs := startWith(t, path, long)
	gaps := 0
	var last time.Time
	for i := range 10 {
		write(t, path, strings.Repeat("x", i+1))
		if now := time.Now(); i > 0 && now.Sub(last) >= long {
			gaps++
		}
		last = time.Now()
		time.Sleep(long / 10)
	}
	expectChange(t, w, "a burst of writes")
	for extra := 0; ; extra++ {
		select {
		case <-w.Changes():
			if extra+1 > gaps {
				t.Fatalf("%d changes reported for one burst of writes with %d gaps of %v or more", extra+2, gaps, long)
			}
			continue
		case <-time.After(6 * debounce):
		}
		break
	}
	if n := strings.Count(logs.String(), "watched file event"); n < 10 {
		t.Errorf("%d events logged for 10 writes; the test did not exercise the debounce", n)
	}
}

// Saving the same bytes, or touching the file, is not a change.
func TestSameContentIsNoChange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.yaml")
	write(t, path, "a")
	w, logs := start(t, path)
	renameOver(t, path, "a")
	now := time.Now()
	if err := os.Chtimes(path, now, now); err != nil {
		t.Fatal(err)
	}
	expectQuiet(t, w, "same bytes saved again")
	if !strings.Contains(logs.String(), "not in content") {
		t.Errorf("the no-op was not logged at debug:\n%s", logs)
	}
	// Going back and forth reports both changes, not a diff against the start.
	renameOver(t, path, "b")
	expectChange(t, w, "a to b")
	renameOver(t, path, "a")
	expectChange(t, w, "b back to a")
}

// Events for other files in the directory are ignored.
func TestOtherFilesIgnored(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p.yaml")
	write(t, path, "a")
	w, logs := start(t, path)
	write(t, filepath.Join(dir, "other.yaml"), "x")
	renameOver(t, filepath.Join(dir, "p.yaml.bak"), "y")
	expectQuiet(t, w, "other files written")
	if strings.Contains(logs.String(), "watched file event") {
		t.Errorf("events on other files were considered:\n%s", logs)
	}
}

// Deleting the file is no change (a reload could only fail); recreating it
// with new contents is, whatever time passes between the two.
func TestDeleteAndRecreate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.yaml")
	write(t, path, "a")
	w, logs := start(t, path)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	expectQuiet(t, w, "deleted")
	if !strings.Contains(logs.String(), "missing") {
		t.Errorf("the missing file was not logged:\n%s", logs)
	}
	write(t, path, "b")
	expectChange(t, w, "recreated with new contents")
	// Recreated with the same contents: nothing to reload.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	expectQuiet(t, w, "deleted again")
	write(t, path, "b")
	expectQuiet(t, w, "recreated with the same contents")
}

// Files the main file names are part of its contents: a change in one is a
// change, in any directory, and the list follows the main file's edits.
func TestRelatedFiles(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	path := filepath.Join(dir, "p.yaml")
	write(t, filepath.Join(dir, "a.netset"), "10.0.0.0/8\n")
	write(t, filepath.Join(other, "b.netset"), "192.0.2.0/24\n")
	rel, err := filepath.Rel(dir, filepath.Join(other, "b.netset"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, path, "include a.netset\n")
	w, _ := start(t, path)

	renameOver(t, filepath.Join(dir, "a.netset"), "10.0.0.0/9\n")
	expectChange(t, w, "list file replaced")
	write(t, filepath.Join(other, "b.netset"), "192.0.2.0/25\n")
	expectQuiet(t, w, "a file not (yet) named")

	// The main file names b too: one change for the edit, then b counts.
	write(t, path, "include a.netset\ninclude "+rel+"\n")
	expectChange(t, w, "main file edited")
	write(t, filepath.Join(other, "b.netset"), "192.0.2.0/26\n")
	expectChange(t, w, "newly named list file edited")

	// A named file that does not exist yet: no change until it does.
	write(t, path, "include a.netset\ninclude c.netset\n")
	expectQuiet(t, w, "names a missing file")
	write(t, filepath.Join(dir, "c.netset"), "198.51.100.0/24\n")
	expectChange(t, w, "the missing file written")
	// b is no longer named.
	write(t, filepath.Join(other, "b.netset"), "192.0.2.0/27\n")
	expectQuiet(t, w, "a file no longer named")
}

func TestNewFailsOnMissingDirectory(t *testing.T) {
	if _, err := New(filepath.Join(t.TempDir(), "no", "such", "p.yaml"), Options{}); err == nil {
		t.Fatal("New succeeded on a directory that does not exist")
	}
}

func TestCloseTwice(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.yaml")
	write(t, path, "a")
	w, err := New(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// A file written in place in two parts, with a pause longer than the
// debounce interval but shorter than the settle interval, is reported once,
// whole: a reader woken by the report never reads the half written first.
func TestSettle(t *testing.T) {
	const settle = 2 * time.Second
	// The pause is what the test controls only roughly: on a machine so
	// loaded that it outlasted the settle interval, the half was rightly
	// reported, and the run checks nothing. Up to three runs; in CI none
	// that checks is a failure.
	for attempt := 1; ; attempt++ {
		if pause, ok := settleOnce(t, settle); ok {
			return
		} else if attempt == 3 {
			testutil.Require(t, false, "the writer's pause took %v in three runs, not less than the settle interval %v", pause, settle)
		}
	}
}

// settleOnce is one run of TestSettle on a new file; it reports the
// writer's pause and whether it was short enough to judge the watcher.
func settleOnce(t *testing.T, settle time.Duration) (time.Duration, bool) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "p.yaml")
	write(t, path, "a")
	logs := &testutil.SyncBuffer{}
	w, err := New(path, Options{Debounce: debounce, Settle: settle, Log: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// What a reloading agent would read at each report.
	read := make(chan string, 4)
	go func() {
		for range w.Changes() {
			b, err := os.ReadFile(path)
			if err != nil {
				b = []byte(err.Error())
			}
			read <- string(b)
		}
	}()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	first := time.Now()
	if _, err := f.WriteString("first half, "); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * debounce)
	if _, err := f.WriteString("then the rest"); err != nil {
		t.Fatal(err)
	}
	if pause := time.Since(first); pause >= settle {
		return pause, false
	}
	select {
	case got := <-read:
		if got != "first half, then the rest" {
			t.Fatalf("reported with the file holding %q", got)
		}
	case <-time.After(5 * settle):
		t.Fatal("no change reported")
	}
	select {
	case got := <-read:
		t.Fatalf("a second change reported, the file holding %q", got)
	case <-time.After(settle + 4*debounce):
	}
	return 0, true
}
