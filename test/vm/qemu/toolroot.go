// SPDX-License-Identifier: Apache-2.0

// Tools of another architecture in the VM: an arm64 guest cannot run the
// host's amd64 servers, and the host's ldd cannot resolve an arm64
// executable's libraries. With --tool-root, the tools come from a file tree
// of Debian's packages for the guest, unpacked there and never installed
// (make deps), and the runner does what the guest's dynamic loader will do
// with an executable: map its program interpreter (PT_INTERP), then each
// DT_NEEDED name found first in the loader's system directories, and the
// libraries those name in turn. Every file goes into the VM at its path in
// the tree, so the guest's loader finds them where Debian puts them.

package main

import (
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// toolRoot is a file tree laid out as the guest's root (--tool-root).
type toolRoot struct{ dir string }

// maxLinks bounds the symbolic links followed for one path, as the
// kernel's ELOOP does.
const maxLinks = 40

// libraryDirs is the loader's system search path on a Debian guest (ld.so
// --help of bookworm's glibc): the only places a library is looked up in
// the VM, which has no /etc/ld.so.cache and whose tools name no run path.
func libraryDirs() []string {
	return []string{"/lib/" + guest.Triplet, "/usr/lib/" + guest.Triplet, "/lib", "/usr/lib"}
}

// checkRootTools resolves --tool arguments inside root: a name is looked up
// in the tree's directories of the VM's PATH, a path (with a slash) is taken
// from the tree's root. It returns the tools, their loaders and libraries,
// each once, at their VM paths.
func checkRootTools(root string, args []string) ([]extraFile, error) {
	st, err := os.Stat(root)
	if err != nil {
		return nil, fmt.Errorf("--tool-root: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("--tool-root %s: not a directory", root)
	}
	r := toolRoot{dir: root}
	var files []extraFile
	seen := map[string]bool{}
	for _, arg := range args {
		p, err := r.lookPath(arg)
		if err == nil {
			err = r.add(p, true, &files, seen)
		}
		if err != nil {
			return nil, fmt.Errorf("--tool %s (in %s): %w", arg, root, err)
		}
	}
	return files, nil
}

// lookPath returns the VM path of the executable arg names.
func (r toolRoot) lookPath(arg string) (string, error) {
	if strings.Contains(arg, "/") {
		return path.Clean("/" + arg), nil
	}
	for _, dir := range strings.Split(vmPATH, ":") {
		p := path.Join(dir, arg)
		host, err := r.resolve(p)
		if err != nil {
			continue
		}
		if st, err := os.Stat(host); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("not found in %s of the tree", vmPATH)
}

// add puts the object at VM path p into files, then its interpreter and
// the libraries it needs. An executable must be the guest's; a library
// must be a shared object of the guest's architecture.
func (r toolRoot) add(p string, executable bool, files *[]extraFile, seen map[string]bool) error {
	if seen[p] {
		return nil
	}
	seen[p] = true
	host, err := r.resolve(p)
	if err != nil {
		return err
	}
	if executable {
		if _, err := checkExecutable(host); err != nil {
			return err
		}
	}
	*files = append(*files, extraFile{Src: host, Dst: p})
	interp, needed, err := dynamicDeps(host)
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	if interp != "" {
		if err := r.add(interp, false, files, seen); err != nil {
			return fmt.Errorf("%s's interpreter: %w", p, err)
		}
	}
	for _, name := range needed {
		lib, err := r.findLibrary(name)
		if err == nil {
			err = r.add(lib, false, files, seen)
		}
		if err != nil {
			return fmt.Errorf("%s needs %s: %w", p, name, err)
		}
	}
	return nil
}

// dynamicDeps reads what the loader acts on: the program interpreter and
// the DT_NEEDED names. A run path (DT_RUNPATH, DT_RPATH) is refused rather
// than half followed: no tool of the trees make deps unpacks has one.
func dynamicDeps(host string) (interp string, needed []string, err error) {
	f, err := elf.Open(host)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	if f.Machine != guest.Machine {
		return "", nil, fmt.Errorf("built for %v, the VM is %s (%v)", f.Machine, guest.Name, guest.Machine)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			b := make([]byte, prog.Filesz)
			if _, err := prog.ReadAt(b, 0); err != nil {
				return "", nil, fmt.Errorf("PT_INTERP: %w", err)
			}
			interp = strings.TrimRight(string(b), "\x00")
		}
	}
	if f.Section(".dynamic") == nil {
		return interp, nil, nil // static
	}
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		if rp, err := f.DynString(tag); err == nil && len(rp) > 0 {
			return "", nil, fmt.Errorf("%v %q: run paths are not followed", tag, strings.Join(rp, ":"))
		}
	}
	needed, err = f.ImportedLibraries()
	return interp, needed, err
}

// findLibrary returns the VM path at which the guest's loader finds the
// library name: the first of its system directories holding it.
func (r toolRoot) findLibrary(name string) (string, error) {
	if strings.Contains(name, "/") {
		return "", errors.New("a DT_NEEDED path is not looked up")
	}
	for _, dir := range libraryDirs() {
		p := path.Join(dir, name)
		host, err := r.resolve(p)
		if err != nil {
			continue
		}
		if st, err := os.Stat(host); err == nil && st.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", fmt.Errorf("not in %s of the tree", strings.Join(libraryDirs(), ", "))
}

// resolve returns the host path of the file at VM path p, following
// symbolic links as the VM would: an absolute target starts at the tree's
// root, and ".." never leaves it. Debian's packages hold both kinds
// (/lib/ld-linux-aarch64.so.1 is relative, others absolute).
func (r toolRoot) resolve(p string) (string, error) {
	done := "/"
	rest := strings.Split(p, "/")
	for links := 0; len(rest) > 0; {
		name := rest[0]
		rest = rest[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			done = path.Dir(done)
			continue
		}
		next := path.Join(done, name)
		host := filepath.Join(r.dir, filepath.FromSlash(next))
		st, err := os.Lstat(host)
		if err != nil {
			return "", fmt.Errorf("%s: %w", p, err)
		}
		if st.Mode()&fs.ModeSymlink == 0 {
			done = next
			continue
		}
		if links++; links > maxLinks {
			return "", fmt.Errorf("%s: too many levels of symbolic links", p)
		}
		target, err := os.Readlink(host)
		if err != nil {
			return "", err
		}
		if path.IsAbs(target) {
			done = "/"
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	return filepath.Join(r.dir, filepath.FromSlash(done)), nil
}
