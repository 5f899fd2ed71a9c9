// SPDX-License-Identifier: Apache-2.0

package packaging_test

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// release is what one make dist wrote: the tests share it, since building
// both architectures takes minutes.
type release struct {
	dir        string
	describe   string // git describe: the binaries' version
	debVersion string
	err        error
}

// releaseArch is one architecture of the release: Go's name, Debian's, the
// ELF machine its binary must be built for and the qemu user-mode emulator
// that runs it on another machine.
type releaseArch struct {
	goarch, debarch string
	machine         elf.Machine
	qemu            string
}

// releaseArches are the architectures make dist builds (DIST_ARCHES).
var releaseArches = []releaseArch{
	{goarch: "amd64", debarch: "amd64", machine: elf.EM_X86_64, qemu: "qemu-x86_64-static"},
	{goarch: "arm64", debarch: "arm64", machine: elf.EM_AARCH64, qemu: "qemu-aarch64-static"},
}

func (r *release) bin(a releaseArch) string {
	return filepath.Join(r.dir, "xdplimit_"+r.describe+"_linux_"+a.goarch)
}

func (r *release) deb(a releaseArch) string {
	return filepath.Join(r.dir, "xdplimit_"+r.debVersion+"_"+a.debarch+".deb")
}

var (
	distOnce sync.Once
	distDir  string // removed by TestMain
	dist     release
)

func TestMain(m *testing.M) {
	code := m.Run()
	if distDir != "" {
		os.RemoveAll(distDir)
	}
	os.Exit(code)
}

// builtRelease runs make dist once for the test binary and hands every
// caller the same result; a failed build fails each test that needs it.
func builtRelease(t *testing.T) *release {
	t.Helper()
	requireTools(t, map[string]string{"make": "make", "git": "git", "gzip": "gzip", "sha256sum": "coreutils", "dpkg": "dpkg"})
	root := repoRoot(t)
	distOnce.Do(func() {
		// Stays the error unless every step completes: a helper's Fatal
		// ends this function early.
		dist.err = fmt.Errorf("make dist was not run to its end: see the first test that needed it")
		dir, err := os.MkdirTemp("", "xdplimit-dist-")
		if err != nil {
			dist.err = err
			return
		}
		distDir = dir
		dist.dir = dir
		dist.describe = gitDescribe(t, root)
		dist.debVersion = expectedDebVersion(t, root, dist.describe)
		start := time.Now()
		if out, err := runErr(root, cleanEnv(), 20*time.Minute, "make", "dist", "DIST="+dir); err != nil {
			dist.err = fmt.Errorf("make dist: %v\n%s", err, out)
			return
		}
		t.Logf("make dist (%d architectures): %v", len(releaseArches), time.Since(start).Round(time.Second))
		dist.err = nil
	})
	if dist.err != nil {
		t.Fatal(dist.err)
	}
	return &dist
}
