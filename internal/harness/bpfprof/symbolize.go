// SPDX-License-Identifier: Apache-2.0

package bpfprof

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
)

// Place is where a sample landed: a source line of the program, or a
// kernel function outside it.
type Place struct {
	InProgram bool
	// File:Line of the program's source (file without its directory), or
	// the kernel function's name ("?" when the address is in neither).
	Name string
	// Text is the source line, trimmed (empty outside the program).
	Text string
}

// Symbolizer names the places of one loaded program's samples.
type Symbolizer struct {
	funcs []span    // the program's JIT-compiled functions, by start
	lines []linePos // every line info's JIT address, sorted
	ksyms []ksym    // the kernel's text symbols, sorted
}

type span struct{ start, end uint64 }

type linePos struct {
	addr  uint64
	place Place
}

type ksym struct {
	addr uint64
	name string
}

// NewSymbolizer reads prog's JIT layout and line info, and the kernel's
// symbols. It needs what bpftool's `prog dump jited linum` needs: root,
// BTF line info in the program, and kernel addresses visible
// (kptr_restrict).
func NewSymbolizer(prog *ebpf.Program) (*Symbolizer, error) {
	info, err := prog.Info()
	if err != nil {
		return nil, err
	}
	addrs, ok := info.JitedKsymAddrs()
	lens, ok2 := info.JitedFuncLens()
	jited, ok3 := info.JitedLineInfos()
	if !ok || !ok2 || !ok3 || len(addrs) != len(lens) || len(addrs) == 0 || addrs[0] == 0 {
		return nil, fmt.Errorf("the program's JIT addresses are not visible (not JIT-compiled, or kernel addresses restricted)")
	}
	lines, err := info.LineInfos()
	if err != nil {
		return nil, fmt.Errorf("the program's line info: %w", err)
	}
	if len(lines) != len(jited) {
		return nil, fmt.Errorf("%d line infos but %d JIT addresses for them", len(lines), len(jited))
	}
	s := &Symbolizer{}
	for i, a := range addrs {
		s.funcs = append(s.funcs, span{uint64(a), uint64(a) + uint64(lens[i])})
	}
	sort.Slice(s.funcs, func(i, j int) bool { return s.funcs[i].start < s.funcs[j].start })
	for i, l := range lines {
		if l.Line == nil {
			continue
		}
		s.lines = append(s.lines, linePos{jited[i], Place{InProgram: true,
			Name: fmt.Sprintf("%s:%d", filepath.Base(l.Line.FileName()), l.Line.LineNumber()),
			Text: strings.TrimSpace(l.Line.Line())}})
	}
	sort.SliceStable(s.lines, func(i, j int) bool { return s.lines[i].addr < s.lines[j].addr })
	if s.ksyms, err = kernelSymbols(); err != nil {
		return nil, err
	}
	return s, nil
}

// Place names where ip is.
func (s *Symbolizer) Place(ip uint64) Place {
	if f := s.funcOf(ip); f != nil {
		// The last line that starts at or before ip, in ip's function.
		i := sort.Search(len(s.lines), func(i int) bool { return s.lines[i].addr > ip }) - 1
		if i >= 0 && s.lines[i].addr >= f.start {
			return s.lines[i].place
		}
		return Place{InProgram: true, Name: "?"}
	}
	if ip < 1<<63 {
		// Kernel addresses are the upper half: this is the thread in
		// user space, entering or leaving the test run's system call.
		return Place{Name: "(user space)"}
	}
	i := sort.Search(len(s.ksyms), func(i int) bool { return s.ksyms[i].addr > ip }) - 1
	if i < 0 {
		return Place{Name: "?"}
	}
	return Place{Name: s.ksyms[i].name}
}

func (s *Symbolizer) funcOf(ip uint64) *span {
	i := sort.Search(len(s.funcs), func(i int) bool { return s.funcs[i].start > ip }) - 1
	if i >= 0 && ip < s.funcs[i].end {
		return &s.funcs[i]
	}
	return nil
}

// kernelSymbols reads the text symbols of /proc/kallsyms, sorted by
// address. Addresses all 0 mean kptr_restrict hides them.
func kernelSymbols() ([]ksym, error) {
	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []ksym
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 || (fields[1] != "t" && fields[1] != "T") {
			continue
		}
		a, err := strconv.ParseUint(fields[0], 16, 64)
		if err != nil || a == 0 {
			continue
		}
		out = append(out, ksym{a, fields[2]})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("/proc/kallsyms shows no addresses (kptr_restrict)")
	}
	sort.Slice(out, func(i, j int) bool { return out[i].addr < out[j].addr })
	return out, nil
}
