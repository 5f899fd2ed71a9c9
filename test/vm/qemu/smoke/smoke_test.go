package smoke

import (
	"fmt"
	"os"
	"runtime"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// need stops the test when a prerequisite is missing. With CI set (the VM's
// init sets CI=true) that is a failure, because there the environment is
// supposed to be complete and a skip would hide a broken runner; on a
// developer's machine it is a skip with the reason.
func need(t *testing.T, ok bool, format string, args ...any) {
	t.Helper()
	if ok {
		return
	}
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") != "" {
		t.Fatalf("missing prerequisite (CI is set, so this fails): %s", msg)
	}
	t.Skipf("missing prerequisite: %s", msg)
}

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
	need(t, err == nil, "statfs /sys/fs/bpf: %v", err)
	need(t, st.Type == unix.BPF_FS_MAGIC, "/sys/fs/bpf is not a bpffs (f_type %#x, want %#x)", st.Type, unix.BPF_FS_MAGIC)
}

// TestVethNativeXDP creates a veth pair over netlink, loads a minimal XDP
// program and attaches it in driver mode, which is what the rate limiter
// needs on veth and what generic-mode fallback would silently hide.
//
// Everything happens in a fresh network namespace: on a host the test then
// cannot clash with real interfaces or parallel tests, and whatever it
// creates goes away with the namespace even if the test dies half way.
func TestVethNativeXDP(t *testing.T) {
	need(t, os.Geteuid() == 0, "must run as root (CAP_NET_ADMIN, CAP_BPF), uid is %d", os.Geteuid())

	// Namespaces belong to OS threads: keep this goroutine on one thread for
	// the whole test. If the original namespace cannot be restored, the
	// thread stays locked and the Go runtime discards it when the test
	// goroutine exits, so no other goroutine inherits the test namespace.
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("current netns: %v", err)
	}
	defer orig.Close()
	ns, err := netns.New() // also switches this thread into it
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("new netns: %v", err)
	}
	defer ns.Close()
	defer func() {
		if err := netns.Set(orig); err != nil {
			t.Errorf("restore netns: %v", err)
			return
		}
		runtime.UnlockOSThread()
	}()

	// Only NETLINK_ROUTE: a handle for all families also opens NETLINK_XFRM,
	// which fails with "protocol not supported" on kernels where xfrm_user is
	// a module that is not loaded (Debian's cloud kernel in the VM).
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatalf("netlink handle: %v", err)
	}
	defer h.Close()

	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "xdpl0"}, PeerName: "xdpl1"}
	if err := h.LinkAdd(veth); err != nil {
		t.Fatalf("create veth pair over netlink: %v", err)
	}
	for _, name := range []string{"xdpl0", "xdpl1"} {
		l, err := h.LinkByName(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := h.LinkSetUp(l); err != nil {
			t.Fatalf("set %s up: %v", name, err)
		}
	}
	dev, err := h.LinkByName("xdpl0")
	if err != nil {
		t.Fatal(err)
	}

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
		t.Fatalf("load XDP program: %v", err)
	}
	defer prog.Close()

	// BPF_PROG_TEST_RUN needs at least an Ethernet header's worth of data.
	ret, err := prog.Run(&ebpf.RunOptions{Data: make([]byte, 14)})
	if err != nil {
		t.Fatalf("test run: %v", err)
	}
	if ret != 2 {
		t.Fatalf("test run returned %d, want 2 (XDP_PASS)", ret)
	}

	lk, err := link.AttachXDP(link.XDPOptions{
		Program:   prog,
		Interface: dev.Attrs().Index,
		Flags:     link.XDPDriverMode,
	})
	if err != nil {
		t.Fatalf("attach XDP in driver mode to veth: %v", err)
	}
	defer lk.Close()

	// Read the attachment back from the kernel rather than trusting the
	// attach call: the mode must be driver and the program ours.
	dev, err = h.LinkByName("xdpl0")
	if err != nil {
		t.Fatal(err)
	}
	xdp := dev.Attrs().Xdp
	if xdp == nil || !xdp.Attached {
		t.Fatalf("netlink shows no XDP program on xdpl0")
	}
	if xdp.AttachMode != nl.XDP_ATTACHED_DRV {
		t.Fatalf("XDP attach mode %d, want %d (driver)", xdp.AttachMode, nl.XDP_ATTACHED_DRV)
	}
	info, err := prog.Info()
	if err != nil {
		t.Fatal(err)
	}
	id, ok := info.ID()
	if !ok || uint32(id) != xdp.ProgId {
		t.Fatalf("xdpl0 runs program id %d, want %d", xdp.ProgId, id)
	}
	t.Logf("XDP program %d attached in driver mode to veth xdpl0 (ifindex %d)", id, dev.Attrs().Index)

	if err := lk.Close(); err != nil {
		t.Fatalf("detach: %v", err)
	}
	if err := h.LinkDel(dev); err != nil {
		t.Fatalf("delete veth: %v", err)
	}
}
