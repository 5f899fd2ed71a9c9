// SPDX-License-Identifier: Apache-2.0

// Checks of the command's operands (test binaries, --file, --tool, --tree
// and --env), made before anything is downloaded or booted, so that a typo
// costs a second and not a VM boot. Every executable that goes into the VM
// must be static, the initramfs holding no C library, but the --tool ones,
// which bring their own (tools.go).

package main

import (
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// checkBinaries validates the test binaries ("bin" or "bin:pkgdir") and
// derives their VM names.
func checkBinaries(args []string) ([]testBinary, error) {
	var tests []testBinary
	seen := map[string]string{}
	for _, arg := range args {
		p, pkgDir, _ := strings.Cut(arg, ":")
		if pkgDir != "" {
			st, err := os.Stat(pkgDir)
			if err != nil {
				return nil, err
			}
			if !st.IsDir() {
				return nil, fmt.Errorf("%s: %s is not a package directory", arg, pkgDir)
			}
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, err
		}
		name := filepath.Base(abs)
		if !validName.MatchString(name) {
			return nil, fmt.Errorf("%s: test binary names may only contain letters, digits and ._+-", p)
		}
		if other, dup := seen[name]; dup {
			return nil, fmt.Errorf("%s and %s have the same name in the VM: give them distinct go test -o names", other, p)
		}
		seen[name] = p
		if err := checkStaticBinary(abs); err != nil {
			return nil, err
		}
		tests = append(tests, testBinary{Name: name, Path: abs, PkgDir: pkgDir})
	}
	return tests, nil
}

// checkFiles parses --file arguments. Executables among them must be static
// for the same reason as the test binaries.
func checkFiles(args []string) ([]extraFile, error) {
	var files []extraFile
	for _, arg := range args {
		src, dst, _ := strings.Cut(arg, ":")
		st, err := os.Stat(src)
		if err != nil {
			return nil, fmt.Errorf("--file %s: %w", arg, err)
		}
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("--file %s: not a regular file", arg)
		}
		if dst == "" {
			dst = "/usr/local/bin/" + filepath.Base(src)
		}
		if !filepath.IsAbs(dst) || filepath.Clean(dst) != dst || strings.HasPrefix(dst, "/tests/") {
			return nil, fmt.Errorf("--file %s: the VM path must be absolute, clean and outside /tests", arg)
		}
		if st.Mode().Perm()&0o111 != 0 && isELF(src) { // scripts run under busybox sh
			if err := checkStaticBinary(src); err != nil {
				return nil, err
			}
		}
		files = append(files, extraFile{Src: src, Dst: dst})
	}
	return files, nil
}

func isELF(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	magic := make([]byte, 4)
	_, err = io.ReadFull(f, magic)
	return err == nil && string(magic) == elf.ELFMAG
}

func checkEnv(env []string) error {
	for _, kv := range env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsAny(k, " \t\n'\"$") {
			return fmt.Errorf("--env %q: want KEY=VALUE", kv)
		}
	}
	return nil
}

// checkTrees parses --tree arguments: directories of the repository, named
// relative to it (the directory the runner starts in), that tests read
// beside their package.
func checkTrees(args []string) error {
	for _, d := range args {
		if _, ok := repoRelative(d); !ok {
			return fmt.Errorf("--tree %s: want a directory inside the repository, named relative to it", d)
		}
		st, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("--tree %s: %w", d, err)
		}
		if !st.IsDir() {
			return fmt.Errorf("--tree %s: not a directory", d)
		}
	}
	return nil
}
