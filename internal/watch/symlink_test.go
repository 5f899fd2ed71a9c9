// SPDX-License-Identifier: Apache-2.0

package watch

// Paths through symbolic links: a ConfigMap volume's swapped directory
// link, a link repointed at another file, and how resolve follows them.

import (
	"os"
	"path/filepath"
	"testing"
)

// A Kubernetes ConfigMap volume: dir/p.yaml -> ..data/p.yaml, ..data ->
// ..TIMESTAMP/, and an update makes a new ..TIMESTAMP directory, points a
// new link at it, renames the link over ..data and removes the old
// directory. No event ever names p.yaml in dir.
func TestSymlinkSwap(t *testing.T) {
	dir := t.TempDir()
	version := func(name, text string) {
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, name, "p.yaml"), text)
	}
	swap := func(name, old string) {
		if err := os.Symlink(name, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
			t.Fatal(err)
		}
	}
	version("..v1", "a")
	if err := os.Symlink("..v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "p.yaml")
	if err := os.Symlink("..data/p.yaml", path); err != nil {
		t.Fatal(err)
	}
	w, _ := start(t, path)
	version("..v2", "b")
	expectQuiet(t, w, "a new version not yet linked")
	swap("..v2", "..v1")
	expectChange(t, w, "first swap")
	// The second swap only shows if the watch followed the link to ..v2.
	version("..v3", "c")
	swap("..v3", "..v2")
	expectChange(t, w, "second swap")
	// Writing in the directory the link points to now is seen too.
	write(t, filepath.Join(dir, "..v3", "p.yaml"), "d")
	expectChange(t, w, "write through the link")
	expectQuiet(t, w, "after the swaps")
}

// A symlink to a file elsewhere, repointed by `ln -sfn`-style rename.
func TestSymlinkRepoint(t *testing.T) {
	cfg, store := t.TempDir(), t.TempDir()
	write(t, filepath.Join(store, "v1.yaml"), "a")
	write(t, filepath.Join(store, "v2.yaml"), "b")
	path := filepath.Join(cfg, "p.yaml")
	if err := os.Symlink(filepath.Join(store, "v1.yaml"), path); err != nil {
		t.Fatal(err)
	}
	w, _ := start(t, path)
	// Editing the target, in another directory, is a change.
	renameOver(t, filepath.Join(store, "v1.yaml"), "a2")
	expectChange(t, w, "target edited")
	if err := os.Symlink(filepath.Join(store, "v2.yaml"), filepath.Join(cfg, ".p.tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(cfg, ".p.tmp"), path); err != nil {
		t.Fatal(err)
	}
	expectChange(t, w, "link repointed")
	// The old target no longer matters; the new one does.
	write(t, filepath.Join(store, "v1.yaml"), "zzz")
	expectQuiet(t, w, "old target edited")
	write(t, filepath.Join(store, "v2.yaml"), "b2")
	expectChange(t, w, "new target edited")
}

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "real", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "real", "sub", "f"), "")
	for _, l := range [][2]string{
		{"real", filepath.Join(dir, "d1")},            // directory link, relative
		{filepath.Join(dir, "d1"), dir + "/d2"},       // link to a link, absolute
		{"d2/sub/f", filepath.Join(dir, "file-link")}, // file link through both
	} {
		if err := os.Symlink(l[0], l[1]); err != nil {
			t.Fatal(err)
		}
	}
	root := realDir(dir) // t.TempDir may itself be under a link
	final, links := resolve(filepath.Join(root, "file-link"))
	if want := filepath.Join(root, "real", "sub", "f"); final != want {
		t.Errorf("resolved to %s, want %s", final, want)
	}
	want := []string{"file-link", "d2", "d1"}
	if len(links) != len(want) {
		t.Fatalf("links %q, want the names %q", links, want)
	}
	for i, l := range links {
		if filepath.Base(l) != want[i] {
			t.Errorf("link %d is %s, want %s", i, l, want[i])
		}
	}
	// A missing component ends the walk with the rest as written.
	if final, _ := resolve(filepath.Join(root, "d1", "nope", "f")); final != filepath.Join(root, "real", "nope", "f") {
		t.Errorf("missing path resolved to %s", final)
	}
	// A loop stops.
	if err := os.Symlink("loop", filepath.Join(dir, "loop")); err != nil {
		t.Fatal(err)
	}
	if _, links := resolve(filepath.Join(root, "loop")); len(links) != maxLinks {
		t.Errorf("a link loop followed %d links", len(links))
	}
}
