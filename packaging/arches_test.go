// SPDX-License-Identifier: Apache-2.0

package packaging_test

import (
	"debug/elf"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
)

// TestReleaseArchitectures checks what make dist writes for each
// architecture: a static binary built for that machine that prints its
// version (under qemu user-mode emulation where this machine is another),
// a .deb of that Debian architecture with the same control fields and the
// same files as the others, lintian-clean, and SHA256SUMS over exactly
// these files. TestDebianPackage installs this machine's own.
func TestReleaseArchitectures(t *testing.T) {
	requireTools(t, map[string]string{"dpkg-deb": "dpkg", "lintian": "lintian"})
	r := builtRelease(t)

	var want []string
	for _, a := range releaseArches {
		want = append(want, filepath.Base(r.bin(a)), filepath.Base(r.deb(a)))
	}
	checkSums(t, r.dir, want)

	var firstList []string
	var firstArch string
	for _, a := range releaseArches {
		t.Run(a.goarch, func(t *testing.T) {
			checkStatic(t, r.bin(a), true)
			checkMachine(t, r.bin(a), a.machine)
			runVersion(t, r, a)

			deb := r.deb(a)
			checkControl(t, deb, r.debVersion, a.debarch)
			list := checkContents(t, deb)
			checkPackagedBinary(t, deb, a.machine)
			if firstList == nil {
				firstList, firstArch = list, a.debarch
			} else if !slices.Equal(list, firstList) {
				t.Errorf("the %s package's files differ from the %s package's:\n%s\nwant\n%s",
					a.debarch, firstArch, strings.Join(list, "\n"), strings.Join(firstList, "\n"))
			}
			runLintian(t, deb)
		})
	}
}

// checkSums: SHA256SUMS lists exactly the release's files, and they match.
func checkSums(t *testing.T, dir string, want []string) {
	t.Helper()
	run(t, dir, nil, time.Minute, "sha256sum", "--check", "--strict", "SHA256SUMS")
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(run(t, dir, nil, time.Minute, "cat", "SHA256SUMS")), "\n") {
		if _, name, ok := strings.Cut(line, "  "); ok {
			got = append(got, name)
		}
	}
	slices.Sort(got)
	want = slices.Sorted(slices.Values(want))
	if !slices.Equal(got, want) {
		t.Errorf("SHA256SUMS lists %q, want %q", got, want)
	}
}

// checkMachine reads the ELF header: `file` guesses from magic numbers and
// its output differs between releases.
func checkMachine(t *testing.T, bin string, want elf.Machine) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Machine != want || f.Class != elf.ELFCLASS64 || f.Data != elf.ELFDATA2LSB || f.Type != elf.ET_EXEC {
		t.Errorf("%s: %v %v %v %v, want a 64-bit little-endian %v executable", filepath.Base(bin),
			f.Class, f.Data, f.Machine, f.Type, want)
	}
}

// checkPackagedBinary checks the binary inside the package, not the one
// beside it: nfpm could have been handed the wrong one.
func checkPackagedBinary(t *testing.T, deb string, want elf.Machine) {
	t.Helper()
	tree := t.TempDir()
	run(t, "/", nil, time.Minute, "dpkg-deb", "-x", deb, tree)
	bin := filepath.Join(tree, "usr/sbin/xdplimit")
	checkStatic(t, bin, true)
	checkMachine(t, bin, want)
}

// runVersion runs the binary's version command: natively on its own
// machine, else under qemu user-mode emulation. Outside CI a missing
// emulator skips only that (one line); in CI it fails.
func runVersion(t *testing.T, r *release, a releaseArch) {
	t.Helper()
	argv := []string{r.bin(a), "version"}
	if a.goarch != runtime.GOARCH {
		qemu, err := exec.LookPath(a.qemu)
		if err != nil {
			testutil.Require(t, false, "%s not installed (Debian package qemu-user-static; make deps): the %s binary is not run",
				a.qemu, a.goarch)
			return
		}
		argv = append([]string{qemu}, argv...)
	}
	out := run(t, r.dir, nil, 2*time.Minute, argv[0], argv[1:]...)
	if got, want := firstLine(out), "xdplimit "+r.describe; got != want {
		t.Errorf("%s: %q, want %q", strings.Join(argv, " "), got, want)
	}
	if !regexp.MustCompile(`(?m)^  go: +go1\.`).MatchString(out) {
		t.Errorf("%s printed no Go release:\n%s", strings.Join(argv, " "), out)
	}
}
