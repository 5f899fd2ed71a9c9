// SPDX-License-Identifier: Apache-2.0

// Host tools in the VM: the servers and capture tools that tests start as
// child processes (redis-server, prometheus, tcpdump) are Debian's builds,
// linked against the host's C library. Each goes into the VM at its host
// path together with every shared object the host's dynamic loader resolves
// for it, so the VM runs the very binary the host suite runs.

package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// checkTools resolves --tool arguments (a name looked up on PATH, or an
// absolute path) into the files that go into the VM: the tool at the path
// PATH finds it under (a symlink's target's content, under the link's name:
// redis-server is a link to redis-check-rdb and picks its role by that
// name), then its loader and libraries, each once.
func checkTools(args []string) ([]extraFile, error) {
	var files []extraFile
	seen := map[string]bool{}
	add := func(src, dst string) {
		if !seen[dst] {
			seen[dst] = true
			files = append(files, extraFile{Src: src, Dst: dst})
		}
	}
	for _, arg := range args {
		p, err := exec.LookPath(arg)
		if err != nil {
			return nil, fmt.Errorf("--tool %s: %w", arg, err)
		}
		if p, err = filepath.Abs(p); err != nil {
			return nil, fmt.Errorf("--tool %s: %w", arg, err)
		}
		if strings.HasPrefix(p, "/tests/") {
			return nil, fmt.Errorf("--tool %s: %s is where the VM keeps test binaries", arg, p)
		}
		dynamic, err := checkExecutable(p)
		if err != nil {
			return nil, fmt.Errorf("--tool %s: %w", arg, err)
		}
		add(p, p)
		if !dynamic {
			continue
		}
		libs, err := sharedObjects(p)
		if err != nil {
			return nil, fmt.Errorf("--tool %s: %w", arg, err)
		}
		for _, l := range libs {
			add(l, l)
		}
	}
	return files, nil
}

// sharedObjects asks the host's loader (ldd) which files a dynamic
// executable maps: the same resolution the host applies when the host suite
// runs it, search paths and hardware capabilities included, which a reading
// of DT_NEEDED alone would have to redo.
func sharedObjects(p string) ([]string, error) {
	var stderr bytes.Buffer
	cmd := exec.Command("ldd", p)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %v: %s", p, err, strings.TrimSpace(stderr.String()))
	}
	libs, err := parseLDD(string(out))
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", p, err)
	}
	for _, l := range libs {
		if _, err := os.Stat(l); err != nil {
			return nil, fmt.Errorf("ldd %s: %w", p, err)
		}
	}
	return libs, nil
}

// parseLDD reads ldd's lines: "name => /path (0x...)" for a library,
// "/path (0x...)" for the loader, "name (0x...)" for the vDSO, which the
// kernel provides. A library ldd could not find is an error: the tool
// would not start in the VM either.
func parseLDD(out string) ([]string, error) {
	var libs []string
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		name, target, arrow := strings.Cut(line, "=>")
		if arrow {
			target = strings.TrimSpace(target)
			if strings.HasPrefix(target, "not found") {
				return nil, fmt.Errorf("%s: not found", strings.TrimSpace(name))
			}
		} else {
			target = line
		}
		f := strings.Fields(target)
		if len(f) == 0 || !filepath.IsAbs(f[0]) {
			continue // the vDSO, or "statically linked"
		}
		libs = append(libs, filepath.Clean(f[0]))
	}
	return libs, nil
}
