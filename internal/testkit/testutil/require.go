// SPDX-License-Identifier: Apache-2.0

package testutil

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// IsCI reports whether the tests run in CI, where a missing prerequisite is
// a broken machine rather than a reason to skip.
func IsCI() bool {
	return os.Getenv("CI") != ""
}

// InVM reports whether the tests run in the project's qemu VM
// (test/vm/qemu): an initramfs holding the test binaries, the repository
// directories they read and the tools they start, on an emulated CPU.
func InVM() bool {
	return os.Getenv("XDPLIMIT_VM") != ""
}

// HostOnly skips, in the VM only and saying why, a test whose subject does
// not depend on the kernel and that needs what only a full host has (the
// host suite of the same make test runs it).
func HostOnly(tb testing.TB, why string) {
	tb.Helper()
	if InVM() {
		tb.Skipf("skipping in the VM: %s; the host suite runs it", why)
	}
}

// Require stops the test when ok is false: it fails in CI (env CI set) and
// skips elsewhere, with the formatted one-line reason. A skip in CI would let
// a whole suite pass by running nothing, so CI never skips.
func Require(tb testing.TB, ok bool, format string, args ...any) {
	tb.Helper()
	if ok {
		return
	}
	reason := fmt.Sprintf(format, args...)
	if IsCI() {
		tb.Fatalf("prerequisite missing in CI: %s", reason)
	}
	tb.Skipf("skipping: %s (set CI=1 to make this a failure)", reason)
}

// RequireRoot requires the capabilities the namespace, veth and BPF helpers
// need. It checks capabilities rather than the uid: root in a container can
// lack them, and a capable non-root user is fine.
func RequireRoot(tb testing.TB) {
	tb.Helper()
	missing, err := missingCaps(unix.CAP_SYS_ADMIN, unix.CAP_NET_ADMIN)
	Require(tb, err == nil && len(missing) == 0,
		"needs CAP_SYS_ADMIN and CAP_NET_ADMIN (run as root): missing %v, err %v", missing, err)
}

func missingCaps(caps ...int) ([]int, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return nil, fmt.Errorf("capget: %w", err)
	}
	var missing []int
	for _, c := range caps {
		if data[c/32].Effective&(1<<(uint(c)%32)) == 0 {
			missing = append(missing, c)
		}
	}
	return missing, nil
}

var liveFrames struct {
	once sync.Once
	err  error
}

// RequireLiveFrames requires BPF_PROG_TEST_RUN with
// BPF_F_TEST_XDP_LIVE_FRAMES. It probes by running a real XDP program in that
// mode once per process, because distribution kernels backport and disable
// features independently of their version number.
func RequireLiveFrames(tb testing.TB) {
	tb.Helper()
	RequireRoot(tb)
	liveFrames.once.Do(func() { liveFrames.err = probeLiveFrames() })
	Require(tb, liveFrames.err == nil, "XDP live-frames test runs unavailable: %v", liveFrames.err)
}

func probeLiveFrames() error {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "xdpl_probe",
		Type: ebpf.XDP,
		Instructions: asm.Instructions{
			// XDP_DROP: the probe frame must not leave the loopback device.
			asm.Mov.Imm(asm.R0, 1),
			asm.Return(),
		},
		License: "Dual BSD/GPL",
	})
	if err != nil {
		return fmt.Errorf("load probe program: %w", err)
	}
	defer prog.Close()

	_, err = prog.Run(&ebpf.RunOptions{
		Data:   make([]byte, 64),
		Repeat: 1,
		Flags:  unix.BPF_F_TEST_XDP_LIVE_FRAMES,
	})
	if errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("kernel rejects BPF_F_TEST_XDP_LIVE_FRAMES (needs >= 5.18): %w", err)
	}
	return err
}
