// SPDX-License-Identifier: Apache-2.0

package pktgen

import (
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
)

// TestHoldDispatcher: the hold attaches the program natively in its private
// namespace, and Close detaches it. Send ignores a failed hold (it only
// costs speed), so this is where a broken one shows.
func TestHoldDispatcher(t *testing.T) {
	testutil.RequireRoot(t)
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "xdpl_hold_test", Type: ebpf.XDP, License: "Dual BSD/GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 1), asm.Return()}, // XDP_DROP
	})
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	h, err := HoldDispatcher(prog)
	if err != nil {
		t.Fatal(err)
	}
	if h.link == nil || h.ns == nil {
		t.Fatalf("hold without link or namespace: %+v", h)
	}
	info, err := h.link.Info()
	if err != nil {
		t.Fatal(err)
	}
	pi, err := prog.Info()
	if err != nil {
		t.Fatal(err)
	}
	if id, ok := pi.ID(); !ok || info.Program != id {
		t.Errorf("held link runs program %d, want %d (known: %v)", info.Program, id, ok)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
}
