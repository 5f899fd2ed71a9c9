// SPDX-License-Identifier: Apache-2.0

package maps

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/gen"
)

// The companion programs: objects of their own (bpf2go builds one object
// per source file) that declare every map of xdplimit_maps.h, as
// xdpl_main's does, and work on the limiter's state: the fleet's apply
// program, the reflection guard's egress program and the wipe program of
// Reset. Each map a companion uses is replaced by the limiter's, so that it
// works on the state the packet path uses. Load may have sized those maps
// from its options, or adopted pinned ones, and a replacement must match
// its spec: each spec takes its map's size first.

// loadCompanion loads spec onto the limiter's maps, given by name, into
// objs (a gen.*Programs); what names the program in errors.
func loadCompanion(what string, spec *ebpf.CollectionSpec, byName map[string]*ebpf.Map, progs ebpf.ProgramOptions, objs any) error {
	err := spec.LoadAndAssign(objs, &ebpf.CollectionOptions{MapReplacements: onMaps(spec, byName), Programs: progs})
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return fmt.Errorf("the kernel's verifier rejected the %s program: %+v", what, ve)
	}
	if err != nil {
		return fmt.Errorf("loading the %s program: %w", what, err)
	}
	return nil
}

// onMaps makes spec, a program that declares the limiter's maps, use the
// limiter's own (byName), at their sizes.
func onMaps(spec *ebpf.CollectionSpec, byName map[string]*ebpf.Map) map[string]*ebpf.Map {
	repl := make(map[string]*ebpf.Map, len(byName))
	for name, m := range byName {
		if ms, ok := spec.Maps[name]; ok {
			ms.MaxEntries = m.MaxEntries()
			repl[name] = m
		}
	}
	return repl
}

// loadFleetApply loads the fleet apply program (bpf/fleet_apply.bpf.c).
func loadFleetApply(byName map[string]*ebpf.Map, seed uint64, progs ebpf.ProgramOptions) (*ebpf.Program, error) {
	spec, err := gen.LoadFleetApply()
	if err != nil {
		return nil, fmt.Errorf("reading the embedded fleet apply program: %w", err)
	}
	// It finds the IPv4 table's keys as xdpl_main does.
	if m, ok := byName[Sources4Map]; ok {
		spec.Maps[Sources4Map].MaxEntries = m.MaxEntries()
	}
	if err := setTable4(spec, seed); err != nil {
		return nil, err
	}
	var objs gen.FleetApplyPrograms
	if err := loadCompanion("fleet apply", spec, byName, progs, &objs); err != nil {
		return nil, err
	}
	return objs.XdplFleetApply, nil
}

// loadEgress loads the egress program (bpf/egress.bpf.c), reading the
// clock the XDP program reads.
func loadEgress(byName map[string]*ebpf.Map, clock Clock, progs ebpf.ProgramOptions) (*ebpf.Program, error) {
	spec, err := gen.LoadEgress()
	if err != nil {
		return nil, fmt.Errorf("reading the embedded egress program: %w", err)
	}
	mode := uint32(gen.XdplimitXdplConstXDPL_CLOCK_KTIME)
	if clock == ClockMap {
		mode = uint32(gen.XdplimitXdplConstXDPL_CLOCK_MAP)
	}
	if err := spec.Variables["xdpl_clock_mode"].Set(mode); err != nil {
		return nil, err
	}
	var objs gen.EgressPrograms
	if err := loadCompanion("egress", spec, byName, progs, &objs); err != nil {
		return nil, err
	}
	return objs.XdplEgress, nil
}

// loadWipe loads the wipe program (bpf/wipe.bpf.c) and returns it with its
// spec, whose instructions name the maps it zeroes.
func loadWipe(byName map[string]*ebpf.Map, progs ebpf.ProgramOptions) (*ebpf.Program, *ebpf.ProgramSpec, error) {
	spec, err := gen.LoadWipe()
	if err != nil {
		return nil, nil, fmt.Errorf("reading the embedded wipe program: %w", err)
	}
	var objs gen.WipePrograms
	if err := loadCompanion("wipe", spec, byName, progs, &objs); err != nil {
		return nil, nil, err
	}
	return objs.XdplWipe, spec.Programs["xdpl_wipe"], nil
}
