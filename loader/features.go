package loader

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
)

// Feature is one kernel capability the limiter needs, probed by trying it
// (not by kernel version: distributions backport, and configs differ).
type Feature struct {
	Name string
	// Needed for what; without it attach fails with this explanation.
	For string
	Err error // nil: present
}

// ProbeKernel probes everything the datapath uses. It is cheap (each probe
// loads a tiny program or creates a tiny map once; results are cached).
func ProbeKernel() []Feature {
	probe := func(name, forWhat string, err error) Feature {
		if errors.Is(err, ebpf.ErrNotSupported) {
			return Feature{name, forWhat, err}
		}
		if err != nil {
			return Feature{name, forWhat, fmt.Errorf("probe failed: %w", err)}
		}
		return Feature{Name: name, For: forWhat}
	}
	return []Feature{
		probe("XDP programs", "the datapath", features.HaveProgramType(ebpf.XDP)),
		probe("eBPF v3 ISA (atomics, 32-bit jumps)", "compare-and-swap on shared state", features.HaveV3ISA()),
		probe("bounded loops", "the datapath's loops", features.HaveBoundedLoops()),
		probe("LRU hash maps", "the per-source state table", features.HaveMapType(ebpf.LRUHash)),
		probe("LPM trie maps", "allow/deny lists and CIDR matches", features.HaveMapType(ebpf.LPMTrie)),
		probe("per-CPU arrays", "counters", features.HaveMapType(ebpf.PerCPUArray)),
		probe("bpf_jiffies64 in XDP", "the cheap clock", features.HaveProgramHelper(ebpf.XDP, asm.FnJiffies64)),
		probe("bpf_ktime_get_coarse_ns in XDP", "aligning the cheap clock", features.HaveProgramHelper(ebpf.XDP, asm.FnKtimeGetCoarseNs)),
	}
}

// CheckKernel returns a clear error naming every missing capability, or
// nil. attach runs it before loading, so an old kernel gets this message
// rather than a verifier log.
func CheckKernel() error {
	var missing []string
	for _, f := range ProbeKernel() {
		if f.Err != nil {
			missing = append(missing, fmt.Sprintf("%s (for %s): %v", f.Name, f.For, f.Err))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("this kernel lacks what xdplimit needs:\n  %s", strings.Join(missing, "\n  "))
	}
	return nil
}
