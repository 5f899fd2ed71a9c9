package main

import (
	"bytes"
	"compress/gzip"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// kernel is one Debian kernel image package, unpacked into the cache.
//
// Cache layout, one directory per package version so that a security update
// (which changes the ABI number and package name) never mixes files of two
// kernels:
//
//	<cache>/kernel/<package>_<version>/
//	    vmlinuz            the bootable image
//	    release            uname -r of that kernel (e.g. 6.1.0-56-cloud-amd64)
//	    package            "<package> <version>", for the logs
//	    meta               the metapackage that led to it
//	    modules.builtin    what is compiled in (nothing to load for those)
//	    kernel.deb         the downloaded package, kept so that a module
//	                       asked for later is extracted without a download
//	    modules/<name>.ko  the modules extracted so far, decompressed
type kernel struct {
	Dir      string
	Package  string
	Version  string
	Release  string
	Vmlinuz  string
	builtins map[string]bool
	// tree is the package unpacked in a scratch directory, when a module
	// had to be extracted in this run; close removes it.
	tree *moduleTree
}

// close removes the scratch tree, if any.
func (k *kernel) close() {
	if k.tree != nil {
		k.tree.close()
		k.tree = nil
	}
}

// ensureKernel returns the cached kernel that metaPkg (a Debian metapackage
// such as linux-image-cloud-amd64) currently points to, downloading and
// unpacking it first if it is not cached yet.
//
// The version is resolved with apt-cache on every run (offline, from the local
// package lists) rather than pinned, because Debian removes superseded kernel
// packages from its mirrors after each point release.
func ensureKernel(cacheDir, metaPkg string, logf func(string, ...any)) (*kernel, error) {
	pkg, version, err := resolveKernelPackage(metaPkg)
	if err != nil {
		// Without package lists (or without apt at all) a kernel cached by an
		// earlier run is still good enough to test with.
		k, cerr := newestCachedKernel(cacheDir, metaPkg)
		if cerr != nil {
			return nil, fmt.Errorf("%w (and no cached kernel for it: %v)", err, cerr)
		}
		logf("cannot resolve %s (%v); using cached %s %s", metaPkg, err, k.Package, k.Version)
		return k, nil
	}
	dir := filepath.Join(cacheDir, "kernel", fsSafe(pkg+"_"+version))
	if _, err := os.Stat(filepath.Join(dir, "release")); err == nil {
		return loadKernel(dir)
	}
	logf("downloading %s %s (apt-get download)", pkg, version)
	treeRoot, err := downloadKernel(cacheDir, dir, metaPkg, pkg, version)
	if err != nil {
		return nil, err
	}
	k, err := loadKernel(dir)
	if err != nil {
		if treeRoot != "" {
			os.RemoveAll(treeRoot)
		}
		return nil, err
	}
	if treeRoot != "" {
		// The download unpacked the whole package already; reuse it for the
		// modules instead of unpacking the .deb a second time.
		if k.tree, err = indexModuleTree(k, treeRoot); err != nil {
			return nil, err
		}
	}
	return k, nil
}

// resolveKernelPackage maps the metapackage to the versioned image package it
// depends on, e.g. linux-image-cloud-amd64 -> linux-image-6.1.0-56-cloud-amd64.
func resolveKernelPackage(metaPkg string) (pkg, version string, err error) {
	out, err := exec.Command("apt-cache", "show", "--no-all-versions", metaPkg).Output()
	if err != nil {
		return "", "", fmt.Errorf("apt-cache show %s: %w", metaPkg, exitDetail(err))
	}
	pkg, version, ok := parseKernelDepends(metaPkg, string(out))
	if !ok {
		return "", "", fmt.Errorf("%s depends on no linux-image-* package", metaPkg)
	}
	if version != "" {
		return pkg, version, nil
	}
	// Each apt-cache call costs ~0.7 s here (no pkgcache.bin), so the second
	// one is only made when the dependency does not pin the version.
	out, err = exec.Command("apt-cache", "show", "--no-all-versions", pkg).Output()
	if err != nil {
		return "", "", fmt.Errorf("apt-cache show %s: %w", pkg, exitDetail(err))
	}
	version = controlField(string(out), "Version")
	if version == "" {
		return "", "", fmt.Errorf("apt-cache show %s: no Version field", pkg)
	}
	return pkg, version, nil
}

// parseKernelDepends picks the image package out of a metapackage's control
// record ("Depends: linux-image-6.1.0-56-cloud-amd64 (= 6.1.192-2)"), with
// its version if the dependency pins one exactly.
func parseKernelDepends(metaPkg, control string) (pkg, version string, ok bool) {
	for _, dep := range strings.Split(controlField(control, "Depends"), ",") {
		for _, alt := range strings.Split(dep, "|") {
			words := strings.Fields(strings.NewReplacer("(", " ", ")", " ").Replace(alt))
			if len(words) == 0 || !strings.HasPrefix(words[0], "linux-image-") || words[0] == metaPkg {
				continue
			}
			if len(words) == 3 && words[1] == "=" {
				version = words[2]
			}
			return words[0], version, true
		}
	}
	return "", "", false
}

// controlField returns the first value of a field in Debian control format.
func controlField(control, field string) string {
	for _, line := range strings.Split(control, "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// downloadKernel fetches the package and unpacks what a boot needs into dir.
// Everything happens in a temporary directory next to dir and is renamed into
// place at the end, so a concurrent run or an interrupted one never sees a
// half-written cache entry. It returns the unpacked package, moved into a
// scratch directory inside dir for the caller to remove, or "" if another run
// created dir first.
func downloadKernel(cacheDir, dir, metaPkg, pkg, version string) (treeRoot string, err error) {
	if err := os.MkdirAll(filepath.Join(cacheDir, "kernel"), 0o755); err != nil {
		return "", err
	}
	removeStale(filepath.Join(cacheDir, "kernel"), ".download-")
	tmp, err := os.MkdirTemp(filepath.Join(cacheDir, "kernel"), ".download-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)

	args := []string{"download"}
	if os.Geteuid() == 0 {
		// As root apt drops to the _apt user, which cannot write into a 0700
		// temporary directory; it would fall back with a warning anyway.
		args = append(args, "-o", "APT::Sandbox::User=root")
	}
	args = append(args, pkg+"="+version)
	cmd := exec.Command("apt-get", args...)
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("apt-get download %s=%s: %w\n%s(stale package lists? try apt-get update)", pkg, version, err, out)
	}
	debs, _ := filepath.Glob(filepath.Join(tmp, "*.deb"))
	if len(debs) != 1 {
		return "", fmt.Errorf("apt-get download %s: expected one .deb, found %d", pkg, len(debs))
	}
	deb := filepath.Join(tmp, "kernel.deb")
	if err := os.Rename(debs[0], deb); err != nil {
		return "", err
	}

	tree := filepath.Join(tmp, "tree")
	if out, err := exec.Command("dpkg-deb", "-x", deb, tree).CombinedOutput(); err != nil {
		return "", fmt.Errorf("dpkg-deb -x: %w\n%s", err, out)
	}
	vmlinuz, _ := filepath.Glob(filepath.Join(tree, "boot", "vmlinuz-*"))
	if len(vmlinuz) != 1 {
		return "", fmt.Errorf("%s: expected one boot/vmlinuz-*, found %d", pkg, len(vmlinuz))
	}
	release := strings.TrimPrefix(filepath.Base(vmlinuz[0]), "vmlinuz-")
	modDir, err := findModuleDir(tree, release)
	if err != nil {
		return "", err
	}

	entry := filepath.Join(tmp, "entry")
	if err := os.MkdirAll(filepath.Join(entry, "modules"), 0o755); err != nil {
		return "", err
	}
	if err := os.Rename(deb, filepath.Join(entry, "kernel.deb")); err != nil {
		return "", err
	}
	// A copy, not a rename: the tree is handed on to the module lookup.
	if err := copyFile(vmlinuz[0], filepath.Join(entry, "vmlinuz")); err != nil {
		return "", err
	}
	// modules.builtin is absent from some packages; an empty list is right then.
	builtin, _ := os.ReadFile(filepath.Join(modDir, "modules.builtin"))
	files := map[string]string{
		"modules.builtin": string(builtin),
		"release":         release + "\n",
		"package":         pkg + " " + version + "\n",
		"meta":            metaPkg + "\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(entry, name), []byte(content), 0o644); err != nil {
			return "", err
		}
	}
	if err := os.Rename(entry, dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, "release")); serr == nil {
			return "", nil // another run won the race; its copy is identical
		}
		return "", err
	}
	keep := filepath.Join(dir, fmt.Sprintf(".tree-%d", os.Getpid()))
	if err := os.Rename(tree, keep); err != nil {
		return "", nil // the tree is only an optimisation
	}
	return keep, nil
}

func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o644)
}

// removeStale deletes scratch directories (name prefix in dir) that a killed
// run left behind. Only those older than an hour go: a younger one may belong
// to a run in progress, and each holds a whole unpacked kernel package.
func removeStale(dir, prefix string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > time.Hour {
			os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}

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

func loadKernel(dir string) (*kernel, error) {
	release, err := os.ReadFile(filepath.Join(dir, "release"))
	if err != nil {
		return nil, err
	}
	pkgLine, err := os.ReadFile(filepath.Join(dir, "package"))
	if err != nil {
		return nil, err
	}
	pkg, version, _ := strings.Cut(strings.TrimSpace(string(pkgLine)), " ")
	k := &kernel{
		Dir:      dir,
		Package:  pkg,
		Version:  version,
		Release:  strings.TrimSpace(string(release)),
		Vmlinuz:  filepath.Join(dir, "vmlinuz"),
		builtins: map[string]bool{},
	}
	builtin, err := os.ReadFile(filepath.Join(dir, "modules.builtin"))
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Fields(string(builtin)) {
		k.builtins[moduleName(line)] = true
	}
	return k, nil
}

// newestCachedKernel is the fallback when apt cannot tell which kernel is
// current: the most recently unpacked cache entry that the same metapackage
// led to (so that a mistyped metapackage is an error, not another kernel).
func newestCachedKernel(cacheDir, metaPkg string) (*kernel, error) {
	all, _ := filepath.Glob(filepath.Join(cacheDir, "kernel", "*", "release"))
	var entries []string
	for _, e := range all {
		if b, err := os.ReadFile(filepath.Join(filepath.Dir(e), "meta")); err == nil && strings.TrimSpace(string(b)) == metaPkg {
			entries = append(entries, e)
		}
	}
	if len(entries) == 0 {
		return nil, errors.New("none in " + filepath.Join(cacheDir, "kernel"))
	}
	sort.Slice(entries, func(i, j int) bool {
		a, _ := os.Stat(entries[i])
		b, _ := os.Stat(entries[j])
		return a.ModTime().After(b.ModTime())
	})
	return loadKernel(filepath.Dir(entries[0]))
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

// fsSafe keeps a Debian version usable as a file name component (an epoch
// "1:" would otherwise put a colon into paths that make(1) cannot handle).
func fsSafe(s string) string {
	return strings.NewReplacer(":", "%3a", "/", "_").Replace(s)
}

// exitDetail adds a failed command's stderr to its error.
func exitDetail(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
	}
	return err
}
