// SPDX-License-Identifier: Apache-2.0

package smoke

import (
	"fmt"
	"os"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
)

// TestKernel logs the kernel the tests run on and, inside the VM, checks that
// it is the kernel the runner booted (XDPLIMIT_VM_KERNEL is set by its init).
func TestKernel(t *testing.T) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	release := unix.ByteSliceToString(u.Release[:])
	t.Logf("kernel %s %s (%s)", release, unix.ByteSliceToString(u.Version[:]), unix.ByteSliceToString(u.Machine[:]))
	if want := os.Getenv("XDPLIMIT_VM_KERNEL"); want != "" && release != want {
		t.Fatalf("running on kernel %s, the VM runner booted %s", release, want)
	}
}

// TestBPFFS checks that /sys/fs/bpf is a bpf filesystem, where the loader
// pins its maps.
func TestBPFFS(t *testing.T) {
	var st unix.Statfs_t
	err := unix.Statfs("/sys/fs/bpf", &st)
	testutil.Require(t, err == nil, "statfs /sys/fs/bpf: %v", err)
	testutil.Require(t, st.Type == unix.BPF_FS_MAGIC, "/sys/fs/bpf is not a bpffs (f_type %#x, want %#x)", st.Type, unix.BPF_FS_MAGIC)
}

// TestVethNativeXDP creates a veth pair over netlink, loads a minimal XDP
// program and attaches it in driver mode, which is what the rate limiter
// needs on veth and what generic-mode fallback would silently hide.
//
// Everything happens in a fresh network namespace: on a host the test then
// cannot clash with real interfaces or parallel tests, and whatever it
// creates goes away with the namespace (deleted by the test's cleanup) even
// if the test dies half way.
func TestVethNativeXDP(t *testing.T) {
	ns := testutil.NewNetns(t) // requires root, fails in CI without it
	if err := ns.Do(func() error { return vethNativeXDP(t) }); err != nil {
		t.Fatal(err)
	}
}

// vethNativeXDP is the body of TestVethNativeXDP. It reports failures as
// errors rather than with t.Fatal, which must not be called from a goroutine
// other than the test's own.
func vethNativeXDP(t *testing.T) error {
	// Only NETLINK_ROUTE: a handle for all families also opens NETLINK_XFRM,
	// which fails with "protocol not supported" on kernels where xfrm_user is
	// a module that is not loaded (Debian's cloud kernel in the VM).
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("netlink handle: %w", err)
	}
	defer h.Close()

	dev, err := vethUp(h)
	if err != nil {
		return err
	}
	prog, err := passProgram()
	if err != nil {
		return err
	}
	defer prog.Close()

	lk, err := link.AttachXDP(link.XDPOptions{
		Program:   prog,
		Interface: dev.Attrs().Index,
		Flags:     link.XDPDriverMode,
	})
	if err != nil {
		return fmt.Errorf("attach XDP in driver mode to veth: %w", err)
	}
	defer lk.Close()

	// Read the attachment back from the kernel rather than trusting the
	// attach call: the mode must be driver and the program ours.
	dev, err = h.LinkByName("xdpl0")
	if err != nil {
		return err
	}
	xdp := dev.Attrs().Xdp
	if xdp == nil || !xdp.Attached {
		return fmt.Errorf("netlink shows no XDP program on xdpl0")
	}
	if xdp.AttachMode != nl.XDP_ATTACHED_DRV {
		return fmt.Errorf("XDP attach mode %d, want %d (driver)", xdp.AttachMode, nl.XDP_ATTACHED_DRV)
	}
	info, err := prog.Info()
	if err != nil {
		return err
	}
	id, ok := info.ID()
	if !ok || uint32(id) != xdp.ProgId {
		return fmt.Errorf("xdpl0 runs program id %d, want %d", xdp.ProgId, id)
	}
	t.Logf("XDP program %d attached in driver mode to veth xdpl0 (ifindex %d)", id, dev.Attrs().Index)

	if err := lk.Close(); err != nil {
		return fmt.Errorf("detach: %w", err)
	}
	if err := h.LinkDel(dev); err != nil {
		return fmt.Errorf("delete veth: %w", err)
	}
	return nil
}

// vethUp creates the veth pair xdpl0-xdpl1 over h, sets both ends up and
// returns xdpl0.
func vethUp(h *netlink.Handle) (netlink.Link, error) {
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "xdpl0"}, PeerName: "xdpl1"}
	if err := h.LinkAdd(veth); err != nil {
		return nil, fmt.Errorf("create veth pair over netlink: %w", err)
	}
	for _, name := range []string{"xdpl0", "xdpl1"} {
		l, err := h.LinkByName(name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if err := h.LinkSetUp(l); err != nil {
			return nil, fmt.Errorf("set %s up: %w", name, err)
		}
	}
	return h.LinkByName("xdpl0")
}

// passProgram loads an XDP program that returns XDP_PASS and checks it
// does in a test run.
func passProgram() (*ebpf.Program, error) {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "xdp_pass",
		Type: ebpf.XDP,
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R0, 2), // XDP_PASS
			asm.Return(),
		},
		License: "GPL",
	})
	if err != nil {
		return nil, fmt.Errorf("load XDP program: %+v", err)
	}
	// BPF_PROG_TEST_RUN needs at least an Ethernet header's worth of data.
	ret, err := prog.Run(&ebpf.RunOptions{Data: make([]byte, 14)})
	if err != nil {
		prog.Close()
		return nil, fmt.Errorf("test run: %w", err)
	}
	if ret != 2 {
		prog.Close()
		return nil, fmt.Errorf("test run returned %d, want 2 (XDP_PASS)", ret)
	}
	return prog, nil
}
