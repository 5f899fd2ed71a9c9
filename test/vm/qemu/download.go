// SPDX-License-Identifier: Apache-2.0

// Filling a kernel cache entry: apt-get download of the image package and the
// unpacking of what a boot needs, staged in a scratch directory and renamed
// into place so that concurrent or interrupted runs never see half an entry.
// Apart from kernel.go because only a cold cache runs it.

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

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

	deb, err := aptDownload(tmp, pkg, version)
	if err != nil {
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

// aptDownload downloads pkg at version into dir as dir/kernel.deb.
func aptDownload(dir, pkg, version string) (deb string, err error) {
	args := []string{"download"}
	if os.Geteuid() == 0 {
		// As root apt drops to the _apt user, which cannot write into a 0700
		// temporary directory; it would fall back with a warning anyway.
		args = append(args, "-o", "APT::Sandbox::User=root")
	}
	args = append(args, pkg+"="+version)
	cmd := exec.Command("apt-get", args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("apt-get download %s=%s: %w\n%s(stale package lists? try apt-get update)", pkg, version, err, out)
	}
	debs, _ := filepath.Glob(filepath.Join(dir, "*.deb"))
	if len(debs) != 1 {
		return "", fmt.Errorf("apt-get download %s: expected one .deb, found %d", pkg, len(debs))
	}
	deb = filepath.Join(dir, "kernel.deb")
	if err := os.Rename(debs[0], deb); err != nil {
		return "", err
	}
	return deb, nil
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
