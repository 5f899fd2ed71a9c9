// SPDX-License-Identifier: Apache-2.0

package maps

import (
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/gen"
)

// TestMapList: the map list names every map of the program once and no
// other (a map missing from it would not be pinned, and an adopting attach
// would start it empty), and each entry reads the map of its own name.
func TestMapList(t *testing.T) {
	spec, err := gen.LoadXdplimit()
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for name := range spec.Maps {
		if !strings.HasPrefix(name, ".") { // .rodata and friends: load-time constants
			want = append(want, name)
		}
	}
	got := slices.Clone(MapNames)
	slices.Sort(want)
	slices.Sort(got)
	for _, n := range got {
		if _, ok := slices.BinarySearch(want, n); !ok {
			t.Errorf("MapNames has %q, which the program does not", n)
		}
	}
	for _, n := range want {
		if _, ok := slices.BinarySearch(got, n); !ok {
			t.Errorf("the program has map %q, which MapNames lacks", n)
		}
	}
	if len(slices.Compact(got)) != len(MapNames) {
		t.Errorf("MapNames names a map twice: %v", MapNames)
	}

	// A distinct placeholder in each field, by the name bpf2go tagged it
	// with: Map(name) must return the one of that name.
	var objs gen.XdplimitMaps
	byName := map[string]*ebpf.Map{}
	v := reflect.ValueOf(&objs).Elem()
	for i := 0; i < v.NumField(); i++ {
		m := new(ebpf.Map)
		v.Field(i).Set(reflect.ValueOf(m))
		byName[v.Type().Field(i).Tag.Get("ebpf")] = m
	}
	l := &Limiter{objs: gen.XdplimitObjects{XdplimitMaps: objs}}
	for _, n := range MapNames {
		if l.Map(n) == nil || l.Map(n) != byName[n] {
			t.Errorf("Map(%q) returns another map", n)
		}
	}
	if l.Map("no_such_map") != nil {
		t.Error("Map of an unknown name is not nil")
	}
}

// TestFleetApplyMaps: every map the fleet apply program uses is one of the
// limiter's, which Load passes it by name. A map of its object that no
// limiter map replaced would be created empty at its load, and the program
// would take and fold consumption in a table the packet path never reads.
func TestFleetApplyMaps(t *testing.T) {
	spec, err := gen.LoadFleetApply()
	if err != nil {
		t.Fatal(err)
	}
	prog := spec.Programs[gen.FleetApplyProgXdplFleetApply]
	if prog == nil {
		t.Fatal("no xdpl_fleet_apply in the object")
	}
	used := map[string]bool{}
	for _, ins := range prog.Instructions {
		if ins.IsLoadFromMap() && ins.Reference() != "" {
			used[ins.Reference()] = true
		}
	}
	if len(used) == 0 {
		t.Fatal("the fleet apply program uses no map")
	}
	for name := range used {
		// Its load-time constants (the IPv4 table's seed and mask), which
		// loadFleetApply sets as Load set xdpl_main's.
		if name == ".rodata" {
			continue
		}
		if !slices.Contains(MapNames, name) {
			t.Errorf("the fleet apply program uses map %q, which is not the limiter's", name)
		}
	}
	t.Logf("maps used: %v", slices.Sorted(maps.Keys(used)))
}
