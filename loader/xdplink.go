// SPDX-License-Identifier: Apache-2.0

package loader

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The XDP attachment itself: a link in the mode asked for (or the best one
// the driver takes), a program attached without a link moved aside, and the
// link detached at once.

// attachXDP attaches prog in mode; ModeAuto tries native, then generic, and
// then returns why native failed (nativeErr) beside the generic link.
func attachXDP(prog *ebpf.Program, ifindex int, mode Mode) (lk link.Link, inEffect Mode, nativeErr, err error) {
	try := func(m Mode) (link.Link, error) {
		flags := link.XDPDriverMode
		if m == ModeGeneric {
			flags = link.XDPGenericMode
		}
		return link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifindex, Flags: flags})
	}
	switch mode {
	case ModeNative, ModeGeneric:
		lk, err := try(mode)
		return lk, mode, nil, err
	}
	lk, nativeErr = try(ModeNative)
	if nativeErr == nil {
		return lk, ModeNative, nil, nil
	}
	lk, err = try(ModeGeneric)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("native: %v; generic: %w", nativeErr, err)
	}
	return lk, ModeGeneric, nativeErr, nil
}

func attachedMode(m uint32) string {
	switch m {
	case 1:
		return "native"
	case 2:
		return "generic"
	case 3:
		return "offload"
	case 4:
		return "multi"
	}
	return fmt.Sprintf("mode %d", m)
}

// removeForeign detaches a program attached through netlink and returns a
// function that puts it back. A program attached through a bpf_link belongs
// to its owner and cannot be replaced from here.
func removeForeign(nl netlink.Link, x *netlink.LinkXdp) (func(), error) {
	prog, err := ebpf.NewProgramFromID(ebpf.ProgramID(x.ProgId))
	if err != nil {
		return nil, fmt.Errorf("opening the existing XDP program %d: %w", x.ProgId, err)
	}
	flags := uint32(unix.XDP_FLAGS_DRV_MODE)
	if x.AttachMode == 2 {
		flags = unix.XDP_FLAGS_SKB_MODE
	}
	if err := netlink.LinkSetXdpFdWithFlags(nl, -1, int(flags)); err != nil {
		prog.Close()
		if errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("the XDP program on %s (id %d) is held by a bpf_link of another process: detach it with its owner", nl.Attrs().Name, x.ProgId)
		}
		return nil, fmt.Errorf("removing the existing XDP program %d: %w", x.ProgId, err)
	}
	return func() {
		_ = netlink.LinkSetXdpFdWithFlags(nl, prog.FD(), int(flags))
		prog.Close()
	}, nil
}

// detachLink detaches a link from its interface now; kernels without
// BPF_LINK_DETACH (before 5.9) fall back to the last reference going.
func detachLink(lk link.Link) error {
	if err := lk.Detach(); err != nil && !errors.Is(err, ebpf.ErrNotSupported) {
		return fmt.Errorf("detaching: %w", err)
	}
	return nil
}
