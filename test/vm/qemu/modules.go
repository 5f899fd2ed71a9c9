// SPDX-License-Identifier: Apache-2.0

// The kernel modules the VM loads (veth and --module): found in the unpacked
// package, decompressed for busybox insmod, checked against the kernel's
// vermagic and ordered by their .modinfo dependencies. Apart from kernel.go
// because it reads ELF and compressed files, not package metadata.

package main

import (
	"bytes"
	"compress/gzip"
	"debug/elf"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// findModuleDir locates lib/modules/<release> in an unpacked package; newer
// Debian releases ship it under usr/lib instead.
func findModuleDir(tree, release string) (string, error) {
	for _, d := range []string{"lib/modules", "usr/lib/modules"} {
		p := filepath.Join(tree, d, release)
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			return p, nil
		}
	}
	return "", fmt.Errorf("no lib/modules/%s in the kernel package", release)
}

// moduleName normalises a module file name or path to the name the kernel
// uses: no directory, no .ko(.xz|.zst|.gz) suffix, '-' folded into '_'.
func moduleName(path string) string {
	base := filepath.Base(path)
	if i := strings.Index(base, ".ko"); i >= 0 {
		base = base[:i]
	}
	return strings.ReplaceAll(base, "-", "_")
}

// modules returns the cached, decompressed files for the named modules and
// everything they depend on, dependencies first: the order insmod needs.
// Built-in modules are left out, since there is nothing to load.
//
// Dependencies come from each module's .modinfo "depends=" string, which is
// what modpost computed at build time and what depmod copies into
// modules.dep; Debian's package ships no modules.dep (depmod runs at install
// time), so reading .modinfo saves running depmod on a scratch tree.
func (k *kernel) modules(names []string) ([]string, error) {
	var (
		order   []string
		visited = map[string]bool{}
	)
	var visit func(name, wantedBy string) error
	visit = func(name, wantedBy string) error {
		name = moduleName(name)
		if visited[name] || k.builtins[name] {
			return nil
		}
		visited[name] = true
		cached := filepath.Join(k.Dir, "modules", name+".ko")
		if _, err := os.Stat(cached); err != nil {
			if k.tree == nil {
				var err error
				if k.tree, err = openModuleTree(k); err != nil {
					return err
				}
			}
			src, ok := k.tree.files[name]
			if !ok {
				if wantedBy != "" {
					return fmt.Errorf("module %s (needed by %s) is not in %s", name, wantedBy, k.Package)
				}
				return fmt.Errorf("module %s is not in %s", name, k.Package)
			}
			if err := decompressModule(src, cached); err != nil {
				return err
			}
		}
		info, err := readModinfo(cached)
		if err != nil {
			return err
		}
		if vm := info["vermagic"]; !strings.HasPrefix(vm, k.Release+" ") {
			return fmt.Errorf("module %s: vermagic %q does not match kernel %s", name, vm, k.Release)
		}
		if deps := info["depends"]; deps != "" {
			for _, dep := range strings.Split(deps, ",") {
				if err := visit(dep, name); err != nil {
					return err
				}
			}
		}
		order = append(order, cached)
		return nil
	}
	for _, n := range names {
		if err := visit(n, ""); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// moduleTree is the cached .deb unpacked into a scratch directory, opened only
// when a module is asked for that no earlier run extracted.
type moduleTree struct {
	root  string
	files map[string]string // module name -> path
}

func openModuleTree(k *kernel) (*moduleTree, error) {
	removeStale(k.Dir, ".tree-")
	root, err := os.MkdirTemp(k.Dir, ".tree-")
	if err != nil {
		return nil, err
	}
	if out, err := exec.Command("dpkg-deb", "-x", filepath.Join(k.Dir, "kernel.deb"), root).CombinedOutput(); err != nil {
		os.RemoveAll(root)
		return nil, fmt.Errorf("dpkg-deb -x: %w\n%s", err, out)
	}
	return indexModuleTree(k, root)
}

// indexModuleTree maps module names to files in an unpacked package at root.
// On error the tree at root is removed.
func indexModuleTree(k *kernel, root string) (*moduleTree, error) {
	t := &moduleTree{root: root, files: map[string]string{}}
	modDir, err := findModuleDir(root, k.Release)
	if err != nil {
		t.close()
		return nil, err
	}
	err = filepath.WalkDir(modDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.Contains(d.Name(), ".ko") {
			t.files[moduleName(path)] = path
		}
		return nil
	})
	if err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}

func (t *moduleTree) close() { os.RemoveAll(t.root) }

// decompressModule writes src to dst as a plain ELF object. Busybox insmod
// passes the file to init_module(2) as is, and the kernel only decompresses
// modules itself on the finit_module path, so compressed modules (.ko.xz,
// .ko.zst, .ko.gz: Debian compresses them from 6.12 on) are unpacked here.
func decompressModule(src, dst string) error {
	var data []byte
	var err error
	switch {
	case strings.HasSuffix(src, ".ko"):
		data, err = os.ReadFile(src)
	case strings.HasSuffix(src, ".ko.gz"):
		var f *os.File
		if f, err = os.Open(src); err == nil {
			defer f.Close()
			var zr *gzip.Reader
			if zr, err = gzip.NewReader(f); err == nil {
				data, err = io.ReadAll(zr)
			}
		}
	case strings.HasSuffix(src, ".ko.xz"):
		data, err = exec.Command("xz", "-dc", src).Output()
	case strings.HasSuffix(src, ".ko.zst"):
		data, err = exec.Command("zstd", "-dcq", src).Output()
	default:
		return fmt.Errorf("%s: unknown module compression", src)
	}
	if err != nil {
		return fmt.Errorf("decompress %s: %w", src, exitDetail(err))
	}
	if !bytes.HasPrefix(data, []byte(elf.ELFMAG)) {
		return fmt.Errorf("%s: not an ELF object after decompression", src)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	tmp := dst + fmt.Sprintf(".tmp%d", os.Getpid())
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// readModinfo returns the key=value strings of a module's .modinfo section.
func readModinfo(path string) (map[string]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, fmt.Errorf("%s: no .modinfo section", path)
	}
	data, err := sec.Data()
	if err != nil {
		return nil, err
	}
	info := map[string]string{}
	for _, kv := range bytes.Split(data, []byte{0}) {
		if k, v, ok := strings.Cut(string(kv), "="); ok {
			if _, dup := info[k]; !dup {
				info[k] = v
			}
		}
	}
	return info, nil
}
