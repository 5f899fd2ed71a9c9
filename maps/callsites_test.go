// SPDX-License-Identifier: Apache-2.0

package maps_test

import (
	"testing"

	"github.com/cilium/ebpf/asm"

	"github.com/xdplimit/xdplimit/gen"
)

// TestMapCallsHaveOneMap: the verifier inlines a map helper (no call, no
// indirect jump) only where one map reaches the call instruction. Clang
// merges calls that differ only in their map into one taking either, which
// cost a known source 25 ns a packet when it happened to the state tables
// (docs/design.md, Verifier). Every map helper call must take its map from
// a load of one map that no branch can bypass.
func TestMapCallsHaveOneMap(t *testing.T) {
	spec, err := gen.LoadXdplimit()
	if err != nil {
		t.Fatal(err)
	}
	helpers := map[asm.BuiltinFunc]bool{asm.FnMapLookupElem: true, asm.FnMapUpdateElem: true, asm.FnMapDeleteElem: true}
	prog := spec.Programs[gen.XdplimitProgXdplMain]
	if prog == nil {
		t.Fatal("no xdpl_main in the object")
	}
	type at struct {
		off asm.RawInstructionOffset
		ins asm.Instruction
		fn  string
	}
	var insns []at
	targets := map[asm.RawInstructionOffset]bool{}
	fn := ""
	for it := prog.Instructions.Iterate(); it.Next(); {
		ins := *it.Ins
		if s := ins.Symbol(); s != "" {
			fn = s
		}
		insns = append(insns, at{it.Offset, ins, fn})
		if c := ins.OpCode.Class(); c.IsJump() {
			if op := ins.OpCode.JumpOp(); op != asm.Call && op != asm.Exit {
				targets[asm.RawInstructionOffset(int64(it.Offset)+1+int64(ins.Offset))] = true
			}
		}
	}
	calls := 0
	for i, c := range insns {
		if !c.ins.IsBuiltinCall() || !helpers[asm.BuiltinFunc(c.ins.Constant)] {
			continue
		}
		calls++
		j := i - 1
		for ; j >= 0 && insns[j].fn == c.fn; j-- {
			in := insns[j].ins
			if in.OpCode.Class().IsJump() && in.OpCode.JumpOp() == asm.Call {
				j = -1 // a call in between clobbers R1
				break
			}
			if in.Dst == asm.R1 && (in.OpCode.Class().IsALU() || in.OpCode.Class().IsLoad()) {
				break
			}
		}
		if j < 0 || insns[j].fn != c.fn || insns[j].ins.OpCode != asm.LoadImmOp(asm.DWord) ||
			insns[j].ins.Src != asm.PseudoMapFD || insns[j].ins.Reference() == "" {
			t.Errorf("%s: map helper call at %d does not take its map from a map load right before it", c.fn, c.off)
			continue
		}
		for k := j + 1; k <= i; k++ {
			if targets[insns[k].off] {
				t.Errorf("%s: a branch lands between the load of map %s (at %d) and the helper call (at %d): the call can see another map",
					c.fn, insns[j].ins.Reference(), insns[j].off, c.off)
				break
			}
		}
	}
	if calls < 10 {
		t.Errorf("found %d map helper calls, which is fewer than the program has", calls)
	}
}
