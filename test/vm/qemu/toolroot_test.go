// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// hostTree lays out, in a temp dir, the file tree of Debian's packages for
// this host's architecture the way make deps unpacks arm64 ones: tool under
// usr/sbin, each library ldd resolves for it under usr/lib/<triplet> as a
// versioned file behind its soname link, lib a link to usr/lib (a merged
// /usr), and the interpreter's path an absolute link into the tree. It
// returns the tree and the sonames ldd listed, the loader's included.
func hostTree(t *testing.T, tool string) (string, []string) {
	t.Helper()
	withGuest(t, runtime.GOARCH)
	bin := needTool(t, tool)
	libs, err := sharedObjects(bin)
	if err != nil {
		t.Fatal(err)
	}
	interp, _, err := dynamicDeps(bin)
	if err != nil || interp == "" {
		t.Fatalf("%s: interpreter %q, %v: want a dynamic executable", bin, interp, err)
	}
	root := t.TempDir()
	libDir := filepath.Join(root, "usr/lib", guest.Triplet)
	place(t, bin, filepath.Join(root, "usr/sbin", tool), 0o755)
	var names []string
	for _, l := range libs {
		name := filepath.Base(l)
		names = append(names, name)
		place(t, l, filepath.Join(libDir, name+".0.0"), 0o644)
		if err := os.Symlink(name+".0.0", filepath.Join(libDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("usr/lib", filepath.Join(root, "lib")); err != nil {
		t.Fatal(err)
	}
	// The loader at the path the executable names, unless that already is
	// where the libraries are.
	if _, err := os.Lstat(filepath.Join(root, interp)); os.IsNotExist(err) {
		os.MkdirAll(filepath.Join(root, path.Dir(interp)), 0o755)
		target := path.Join("/lib", guest.Triplet, path.Base(interp))
		if err := os.Symlink(target, filepath.Join(root, interp)); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(names)
	return root, names
}

// place copies the host file src to dst, making dst's directory.
func place(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, mode); err != nil {
		t.Fatal(err)
	}
}

// The loader's walk over DT_NEEDED in a tree finds what the host's ldd
// finds for the same executable: nft maps a dozen libraries, several only
// through another library (libnftables's libmnl, libedit's libtinfo).
func TestCheckRootToolsAgreesWithLDD(t *testing.T) {
	root, want := hostTree(t, "nft")
	files, err := checkRootTools(root, []string{"nft"})
	if err != nil {
		t.Fatal(err)
	}
	if files[0].Dst != "/usr/sbin/nft" || files[0].Src != filepath.Join(root, "usr/sbin/nft") {
		t.Fatalf("the tool goes in as %+v, want /usr/sbin/nft from the tree", files[0])
	}
	var got []string
	dsts := map[string]bool{}
	for _, f := range files[1:] {
		if dsts[f.Dst] {
			t.Errorf("%s goes in twice", f.Dst)
		}
		dsts[f.Dst] = true
		if !strings.HasPrefix(f.Src, root+"/usr/lib/") || !strings.HasSuffix(f.Src, ".0.0") {
			t.Errorf("%s comes from %s, want the versioned file in the tree", f.Dst, f.Src)
		}
		if name := path.Base(f.Dst); !slices.Contains(got, name) {
			got = append(got, name)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("resolved in the tree: %q\nldd on the host:     %q", got, want)
	}
	libc := path.Join("/lib", guest.Triplet, "libc.so.6")
	if !dsts[libc] {
		t.Errorf("libc does not go to %s, where the guest's loader looks first: %v", libc, dsts)
	}
}

// What the guest's loader would not find makes the run fail before any
// boot, naming the library and who needs it.
func TestCheckRootToolsRefuses(t *testing.T) {
	root, _ := hostTree(t, "nft")
	libDir := filepath.Join(root, "usr/lib", guest.Triplet)
	os.Remove(filepath.Join(libDir, "libc.so.6"))
	_, err := checkRootTools(root, []string{"nft"})
	if err == nil || !strings.Contains(err.Error(), "needs libc.so.6") {
		t.Errorf("without libc: err = %v, want one naming libc.so.6", err)
	}
	if _, err := checkRootTools(root, []string{"no-such-tool"}); err == nil {
		t.Error("a tool the tree lacks was accepted")
	}
	if _, err := checkRootTools(filepath.Join(root, "none"), []string{"nft"}); err == nil {
		t.Error("a missing --tool-root was accepted")
	}
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	withGuest(t, other)
	if _, err := checkRootTools(root, []string{"/usr/sbin/nft"}); err == nil || !strings.Contains(err.Error(), "built for") {
		t.Errorf("a tool of the host's architecture for an %s guest: err = %v", other, err)
	}
}

// Links resolve as in the VM: an absolute target from the tree's root, a
// relative one from the link's directory, and ".." stops at the root
// rather than leaving the tree.
func TestToolRootResolve(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "usr/lib"), 0o755)
	os.WriteFile(filepath.Join(root, "usr/lib/real"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(root, "top"), []byte("y"), 0o644)
	for name, target := range map[string]string{
		"lib":          "usr/lib",
		"usr/lib/abs":  "/lib/real",
		"usr/lib/up":   "../../../../../top",
		"usr/lib/loop": "loop",
	} {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	r := toolRoot{dir: root}
	for p, want := range map[string]string{
		"/lib/real":          "usr/lib/real",
		"/lib/abs":           "usr/lib/real",
		"/usr/lib/up":        "top",
		"/../top":            "top",
		"/usr/lib/../../top": "top",
		"/usr/lib/real":      "usr/lib/real",
	} {
		got, err := r.resolve(p)
		if err != nil || got != filepath.Join(root, want) {
			t.Errorf("resolve(%s) = %s, %v; want %s", p, got, err, filepath.Join(root, want))
		}
	}
	if _, err := r.resolve("/lib/loop"); err == nil || !strings.Contains(err.Error(), "too many levels") {
		t.Errorf("a link to itself: %v", err)
	}
	// As in the kernel, ".." after a link is taken from its target.
	for _, p := range []string{"/lib/none", "/lib/../top"} {
		if _, err := r.resolve(p); err == nil {
			t.Errorf("resolve(%s): no error, want the missing file's", p)
		}
	}
}
