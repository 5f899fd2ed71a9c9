// SPDX-License-Identifier: Apache-2.0

// Which kernel the VM boots: the Debian image package a metapackage points to,
// resolved with apt-cache, and its entry in the cache. Downloading an entry is
// in download.go, its modules in modules.go.

package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
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
// such as linux-image-cloud-amd64 or linux-image-6.12-cloud-amd64, or an
// image package such as linux-image-6.12.107+deb12-cloud-amd64-unsigned)
// currently points to, downloading and unpacking it first if it is not
// cached yet.
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
// An image package (linux-image-<version>..., depending on no other image)
// resolves to itself.
func resolveKernelPackage(metaPkg string) (pkg, version string, err error) {
	out, err := exec.Command("apt-cache", "show", "--no-all-versions", metaPkg).Output()
	if err != nil {
		return "", "", fmt.Errorf("apt-cache show %s: %w", metaPkg, exitDetail(err))
	}
	pkg, version, ok := parseKernelDepends(metaPkg, string(out))
	if !ok && imagePackage.MatchString(metaPkg) {
		pkg, version = metaPkg, controlField(string(out), "Version")
		if version == "" {
			return "", "", fmt.Errorf("apt-cache show %s: no Version field", pkg)
		}
		return pkg, version, nil
	}
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

// imagePackage matches Debian's kernel image packages (not metapackages):
// linux-image-6.1.0-56-cloud-amd64, linux-image-6.12.107+deb12-cloud-amd64-unsigned.
var imagePackage = regexp.MustCompile(`^linux-image-[0-9]+\.[0-9]+\.[0-9]+[-+]`)

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
