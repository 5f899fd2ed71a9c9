// SPDX-License-Identifier: Apache-2.0

// The guest's architecture: which qemu emulates it, how the machine is
// described, where its console is, and which executables run in it.

package main

import (
	"debug/elf"
	"fmt"
	"runtime"
	"slices"
	"strings"
)

// vmArch is what differs between the guests the runner boots.
type vmArch struct {
	Name    string      // Go's name, as --arch takes it
	Machine elf.Machine // of every executable copied into the VM
	QEMU    string      // the system emulator
	Package string      // the Debian package holding it
	// Triplet names the guest's library directories (Debian's multiarch
	// layout, /lib/<triplet>): where --tool-root looks for libraries.
	Triplet string
	// MachineArgs come first on qemu's command line: x86's default PC
	// needs none; arm64 has no default board, and virt is the one made
	// for guests (PCI, virtio, a PL011 serial port).
	MachineArgs []string
	Console     string // the kernel's console device
	// TCGAppend goes on the kernel's command line under TCG (see qemuArgs).
	TCGAppend string
	// TCGCPU is the emulated CPU model under TCG.
	TCGCPU string
	// UserEmulator runs one of the guest's executables on another host
	// (busybox --list-full when the initramfs is built).
	UserEmulator string
}

var vmArches = []vmArch{
	{Name: "amd64", Machine: elf.EM_X86_64, QEMU: "qemu-system-x86_64", Package: "qemu-system-x86",
		Triplet: "x86_64-linux-gnu", Console: "ttyS0", UserEmulator: "qemu-x86_64-static",
		// Under TCG the kernel's boot check finds the vCPUs' TSCs
		// unsynchronized (each vCPU thread reads the host's TSC at its own
		// pace) and falls back to the HPET, whose every read is an
		// emulated device access: the Go runtime's clock, timers and
		// bpf_ktime_get_ns all pay it. The TSC is the host's and is
		// monotonic, so tsc=reliable keeps it, as on real hardware.
		TCGAppend: "tsc=reliable", TCGCPU: "max"},
	{Name: "arm64", Machine: elf.EM_AARCH64, QEMU: "qemu-system-aarch64", Package: "qemu-system-arm",
		Triplet: "aarch64-linux-gnu", MachineArgs: []string{"-machine", "virt"}, Console: "ttyAMA0", UserEmulator: "qemu-aarch64-static",
		// max has pointer authentication, which Debian's arm64 kernel
		// uses in every function's prologue and epilogue: the
		// architected QARMA cipher costs TCG hundreds of host
		// instructions a signature, while pauth-impdef's cheap
		// implementation-defined one is as good for a guest that only
		// needs the signatures to match.
		TCGCPU: "max,pauth-impdef=on"},
}

// guest is the architecture of this run (--arch), amd64 unless told.
var guest = vmArches[0]

// setGuest selects the architecture named by --arch.
func setGuest(name string) error {
	i := slices.IndexFunc(vmArches, func(a vmArch) bool { return a.Name == name })
	if i < 0 {
		var names []string
		for _, a := range vmArches {
			names = append(names, a.Name)
		}
		return fmt.Errorf("--arch %q: want one of %s", name, strings.Join(names, ", "))
	}
	guest = vmArches[i]
	qemuBinary = guest.QEMU
	return nil
}

// native says whether the guest is the host's architecture: only then can
// KVM run it, and its executables run here as they are.
func (a vmArch) native() bool { return a.Name == runtime.GOARCH }
