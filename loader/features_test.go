// SPDX-License-Identifier: Apache-2.0

package loader

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"

	"github.com/xdplimit/xdplimit/gen"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
)

// TestKernelFeatures reports what this kernel offers (the VM suite shows it
// for 6.1 and 6.12) and requires everything the datapath needs.
func TestKernelFeatures(t *testing.T) {
	testutil.Require(t, os.Geteuid() == 0, "probing kernel features needs root")
	t.Logf("%s", kernelRelease())
	for _, f := range ProbeKernel() {
		state := "present"
		if f.Err != nil {
			state = "MISSING: " + f.Err.Error()
		}
		if f.Optional {
			state += " (optional)"
		}
		t.Logf("%-45s %-6s %s", f.Name, f.Since, state)
	}
	if err := CheckKernel(); err != nil {
		t.Fatal(err)
	}
}

// TestCheckFeaturesRefuses: attach's refusal names each missing feature,
// what it is for and the release that added it, and the minimum kernel; a
// missing optional feature refuses nothing.
func TestCheckFeaturesRefuses(t *testing.T) {
	missing := fmt.Errorf("%w: unknown func bpf_loop#181", ebpf.ErrNotSupported)
	fs := []Feature{
		{Name: "XDP programs", For: "the datapath", Since: "4.8"},
		{Name: "bpf_loop in XDP", For: "walking long VLAN tag stacks", Since: "5.17", Err: missing},
		{Name: "kernel BTF (/sys/kernel/btf/vmlinux)", For: "CO-RE", Since: "5.4", Optional: true, Err: missing},
	}
	err := checkFeatures("Linux 5.15.0-91-generic", fs)
	want := "this kernel (Linux 5.15.0-91-generic) lacks what xdplimit needs; it needs Linux " + MinimumKernel +
		" or newer, with BPF and XDP enabled:\n" +
		"  bpf_loop in XDP (Linux 5.17, for walking long VLAN tag stacks): " + missing.Error()
	if err == nil || err.Error() != want {
		t.Errorf("got  %v\nwant %s", err, want)
	}
	fs[1].Err = nil
	if err := checkFeatures("Linux 6.1.0-56-cloud-amd64", fs); err != nil {
		t.Errorf("only an optional feature missing: %v", err)
	}
	fs[0].Err = errors.New("probe failed: permission denied")
	if err := checkFeatures("Linux 6.1.0", fs); err == nil || !strings.Contains(err.Error(), "XDP programs (Linux 4.8, for the datapath): probe failed: permission denied") {
		t.Errorf("a failed probe must refuse with its reason: %v", err)
	}
}

// TestMinimumKernel: MinimumKernel is the newest release among the required
// features, so the documented minimum cannot drift from the probes.
func TestMinimumKernel(t *testing.T) {
	newest := "0.0"
	for _, p := range kernelFeatures {
		if !p.optional && versionLess(t, newest, p.since) {
			newest = p.since
		}
	}
	if newest != MinimumKernel {
		t.Errorf("MinimumKernel is %s, the required features need %s", MinimumKernel, newest)
	}
}

func versionLess(t *testing.T, a, b string) bool {
	t.Helper()
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < 2; i++ {
		x, err1 := strconv.Atoi(pa[i])
		y, err2 := strconv.Atoi(pb[i])
		if err1 != nil || err2 != nil {
			t.Fatalf("bad release %q or %q", a, b)
		}
		if x != y {
			return x < y
		}
	}
	return false
}

// TestFeaturesCoverDatapath: every helper and map type the compiled programs
// (the limiter and the fleet's apply program) use is probed (or predates
// XDP), and they need no kernel BTF while that probe is optional. A new
// helper in bpf/ fails this test until kernelFeatures names it, so attach
// never meets it as a verifier error.
func TestFeaturesCoverDatapath(t *testing.T) {
	weakKfuncs := map[string]bool{"bpf_xdp_ct_lookup": true, "bpf_ct_release": true}
	var specs []*ebpf.CollectionSpec
	for _, load := range []func() (*ebpf.CollectionSpec, error){gen.LoadXdplimit, gen.LoadFleetApply} {
		spec, err := load()
		if err != nil {
			t.Fatal(err)
		}
		specs = append(specs, spec)
	}
	helpers := map[asm.BuiltinFunc]bool{
		// In every kernel with XDP programs (4.8).
		asm.FnMapLookupElem: true, asm.FnMapUpdateElem: true, asm.FnMapDeleteElem: true,
		asm.FnKtimeGetNs: true, asm.FnGetSmpProcessorId: true,
	}
	mapTypes := map[ebpf.MapType]bool{ebpf.Array: true, ebpf.Hash: true}
	kernelBTFOptional := false
	for _, p := range kernelFeatures {
		if p.helper != 0 {
			helpers[p.helper] = true
		}
		if p.mapType != ebpf.UnspecifiedMap {
			mapTypes[p.mapType] = true
		}
		if strings.HasPrefix(p.name, "kernel BTF") {
			kernelBTFOptional = p.optional
		}
	}
	for _, spec := range specs {
		for name, prog := range spec.Programs {
			for _, ins := range prog.Instructions {
				if ins.IsBuiltinCall() && !helpers[asm.BuiltinFunc(ins.Constant)] {
					t.Errorf("program %s calls %v, which kernelFeatures does not probe", name, asm.BuiltinFunc(ins.Constant))
					helpers[asm.BuiltinFunc(ins.Constant)] = true // once
				}
				// Weak kfuncs (bpf/conntrack.h) resolve to nothing without
				// the kernel's BTF, and the program runs without them.
				weak := ins.IsKfuncCall() && weakKfuncs[ins.Reference()]
				if kernelBTFOptional && ((ins.IsKfuncCall() && !weak) || btf.CORERelocationMetadata(&ins) != nil) {
					t.Errorf("program %s needs the kernel's BTF (%v): make that feature required", name, ins)
					kernelBTFOptional = false // once
				}
			}
		}
		for name, m := range spec.Maps {
			if !mapTypes[m.Type] {
				t.Errorf("map %s is a %v, which kernelFeatures does not probe", name, m.Type)
			}
		}
	}
}
