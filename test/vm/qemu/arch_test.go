// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
)

// withGuest runs the test with --arch name, and puts amd64 back after.
func withGuest(t *testing.T, name string) {
	t.Helper()
	if err := setGuest(name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { setGuest("amd64") })
}

// An arm64 guest gets the virt board, its PL011 console and its own qemu;
// an amd64 one the PC's defaults and ttyS0.
func TestQEMUArgsPerArch(t *testing.T) {
	for _, c := range []struct {
		arch, qemu, console, cpu string
		machine                  bool
	}{
		{"amd64", "qemu-system-x86_64", "console=ttyS0 ", "-cpu max", false},
		{"arm64", "qemu-system-aarch64", "console=ttyAMA0 ", "-cpu max,pauth-impdef=on", true},
	} {
		withGuest(t, c.arch)
		args := qemuArgs(vmConfig{Kernel: "k", Initrd: "i", Accel: "tcg", MemoryMB: 512, SMP: 2})
		line := strings.Join(args, " ")
		if qemuBinary != c.qemu || !strings.Contains(line, c.console) ||
			strings.HasPrefix(line, "-machine virt ") != c.machine || !strings.HasSuffix(line, c.cpu) {
			t.Errorf("%s: %s %s", c.arch, qemuBinary, line)
		}
	}
	if err := setGuest("riscv64"); err == nil || !strings.Contains(err.Error(), "amd64, arm64") {
		t.Errorf("--arch riscv64: %v, want a refusal naming amd64 and arm64", err)
	}
}

// The VM runs executables of its own architecture only: this test binary
// (the host's) is refused for the other guest, with both named.
func TestCheckExecutablePerArch(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	withGuest(t, runtime.GOARCH)
	if _, err := checkExecutable(self); err != nil {
		t.Errorf("this host's binary for a %s guest: %v", runtime.GOARCH, err)
	}
	withGuest(t, other)
	if _, err := checkExecutable(self); err == nil || !strings.Contains(err.Error(), "the VM is "+other) {
		t.Errorf("this host's binary for a %s guest: %v, want a refusal", other, err)
	}
}

// An arm64 guest on this host is emulated: no KVM probe, whatever
// /dev/kvm says.
func TestAccelForeignGuest(t *testing.T) {
	if runtime.GOARCH == "arm64" {
		t.Skip("the host is arm64: no foreign guest to try")
	}
	withGuest(t, "arm64")
	t.Setenv(accelEnv, "")
	accel, why, err := chooseAccel(t.Context(), t.TempDir(), nil, "", nil)
	if err != nil || accel != "tcg" || !strings.Contains(why, "arm64 guest") {
		t.Errorf("chooseAccel: %q %q %v, want tcg for an arm64 guest", accel, why, err)
	}
}

// A busybox of another architecture lists its applets under qemu's user
// emulator: a cross-compiled stand-in that prints two.
func TestFindBusyboxForeign(t *testing.T) {
	if runtime.GOARCH == "arm64" {
		t.Skip("the host is arm64: no foreign guest to try")
	}
	_, err := exec.LookPath("qemu-aarch64-static")
	testutil.Require(t, err == nil, "qemu-aarch64-static not installed (Debian package qemu-user-static; make deps)")
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte("package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"/bin/sh /bin/ls\") }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bb := filepath.Join(dir, "busybox")
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bb, src)
	cmd.Env = append(os.Environ(), "GOARCH=arm64", "CGO_ENABLED=0", "GOFLAGS=", "GO111MODULE=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	withGuest(t, "arm64")
	got, applets, err := findBusybox(bb)
	if err != nil || got != bb || !slices.Equal(applets, []string{"/bin/sh", "/bin/ls"}) {
		t.Errorf("findBusybox: %q %q %v", got, applets, err)
	}
}
