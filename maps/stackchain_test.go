// SPDX-License-Identifier: Apache-2.0

package maps

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// maxCombinedStack is the most stack a chain of BPF calls may take: the
// kernel checks it on every chain, frames rounded up to 32 bytes. Kernels
// that give functions private stacks (x86 since 6.13) no longer refuse a
// deeper chain, so the host accepts what 6.1 refuses.
const maxCombinedStack = 512

// stackChain is the deepest chain of calls of a loaded program: the
// stack it takes as 6.1 counts it, and its functions' names, outermost
// first.
type stackChain struct {
	bytes int
	funcs []string
}

func (c stackChain) String() string {
	return fmt.Sprintf("%d bytes (%s)", c.bytes, strings.Join(c.funcs, " -> "))
}

// deepestStackChain reads program p's call graph from the instructions the
// kernel kept (its function offsets from the BTF function info, its calls
// from the translated instructions) and its functions' frames from the
// verifier's "stack depth A+B+..." (depths, in the functions' order), and
// returns its deepest chain of calls from the entry: the check 6.1 makes
// on every chain, made here on a kernel that no longer makes it.
func deepestStackChain(p *ebpf.Program, depths string) (stackChain, error) {
	frames, err := parseStackDepths(depths)
	if err != nil {
		return stackChain{}, err
	}
	info, err := p.Info()
	if err != nil {
		return stackChain{}, err
	}
	funcs, err := info.FuncInfos()
	if err != nil {
		return stackChain{}, fmt.Errorf("function info: %w", err)
	}
	insns, err := info.Instructions()
	if err != nil {
		return stackChain{}, fmt.Errorf("translated instructions: %w", err)
	}
	if len(funcs) != len(frames) {
		return stackChain{}, fmt.Errorf("stack depth %q names %d functions, the function info %d", depths, len(frames), len(funcs))
	}
	start := map[asm.RawInstructionOffset]int{}
	names := make([]string, len(funcs))
	for i, f := range funcs {
		start[f.Offset] = i
		names[i] = f.Func.Name
	}
	calls := make([][]int, len(funcs))
	fn := -1
	var off asm.RawInstructionOffset
	for _, ins := range insns {
		if i, ok := start[off]; ok {
			fn = i
		}
		if ins.IsFunctionCall() {
			callee, ok := start[off+asm.RawInstructionOffset(ins.Offset)+1]
			if !ok || fn < 0 {
				return stackChain{}, fmt.Errorf("the call at instruction %d does not reach a function's start", off)
			}
			calls[fn] = append(calls[fn], callee)
		}
		off += asm.RawInstructionOffset(ins.Size() / asm.InstructionSize)
	}
	bytes, path := deepestChain(frames, calls)
	c := stackChain{bytes: bytes}
	for _, i := range path {
		c.funcs = append(c.funcs, fmt.Sprintf("%s %d", names[i], frames[i]))
	}
	return c, nil
}

// parseStackDepths reads the verifier's "stack depth A+B+...".
func parseStackDepths(depths string) ([]int, error) {
	var frames []int
	for _, s := range strings.Split(depths, "+") {
		n, err := strconv.Atoi(s)
		if err != nil {
			return nil, fmt.Errorf("stack depth %q: %v", depths, err)
		}
		frames = append(frames, n)
	}
	return frames, nil
}

// deepestChain returns the most stack a chain of calls from function 0
// takes, each frame rounded as the kernel rounds it (up to 32 bytes, and
// at least 32), and that chain. calls[i] lists the functions i calls; BPF
// has no recursion, so the graph has no cycle.
func deepestChain(frames []int, calls [][]int) (int, []int) {
	round := func(n int) int { return (max(n, 1) + 31) / 32 * 32 }
	var walk func(i int) (int, []int)
	walk = func(i int) (int, []int) {
		best, path := 0, []int(nil)
		for _, c := range calls[i] {
			if d, p := walk(c); d > best {
				best, path = d, p
			}
		}
		return round(frames[i]) + best, append([]int{i}, path...)
	}
	return walk(0)
}

// A chain 6.1 refused: the program's frame at 296 bytes (320 rounded),
// xdpl_check_level's 144 (160) and xdpl_refused_note's 48 (64) under it,
// 544 bytes, though the program's frame plus its deepest function's
// (xdpl_cookie_ack, 192) is 512. At 288 and 112 the same chain takes 480,
// and the deepest is xdpl_cookie_ack's with xdpl_tcpopt_step's 0 (32).
func TestDeepestChain(t *testing.T) {
	calls := [][]int{{1, 3, 5}, {2}, nil, {4}, nil, nil}
	if got, path := deepestChain([]int{296, 144, 48, 192, 0, 0}, calls); got != 544 || fmt.Sprint(path) != "[0 1 2]" {
		t.Errorf("deepestChain = %d %v, want 544 [0 1 2]", got, path)
	}
	if got, path := deepestChain([]int{288, 112, 48, 192, 0, 0}, calls); got != 512 || fmt.Sprint(path) != "[0 3 4]" {
		t.Errorf("deepestChain with a 288-byte frame = %d %v, want 512 [0 3 4]", got, path)
	}
	if got, path := deepestChain([]int{0}, [][]int{nil}); got != 32 || fmt.Sprint(path) != "[0]" {
		t.Errorf("deepestChain of a lone empty frame = %d %v, want 32 [0]", got, path)
	}
	if _, err := parseStackDepths("288+x"); err == nil {
		t.Error("parseStackDepths accepted 288+x")
	}
}
