// SPDX-License-Identifier: Apache-2.0

package loader

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/maps"
)

// MinimumKernel is the oldest Linux release that has every required
// feature below: the newest "since" among them (the raw SYN-cookie helpers).
// The tests check that it is. The oldest kernel the project tests on is
// Debian 12's 6.1.
const MinimumKernel = "6.0"

// Feature is one kernel capability the limiter needs, probed by trying it
// (not by kernel version: distributions backport, and configs differ).
type Feature struct {
	Name string
	// Needed for what; without it attach fails with this explanation.
	For string
	// Since is the mainline release that added it.
	Since string
	// Optional features are reported but not required.
	Optional bool
	Err      error // nil: present
}

// featureProbe is one row of the table below. helper and mapType say which
// helper or map type of the datapath the row covers, so that a test can
// check that every one the compiled program uses is probed.
type featureProbe struct {
	name, forWhat, since string
	optional             bool
	helper               asm.BuiltinFunc
	mapType              ebpf.MapType
	probe                func() error
}

func helperProbe(name string, fn asm.BuiltinFunc, forWhat, since string) featureProbe {
	return featureProbe{name: name + " in XDP", forWhat: forWhat, since: since, helper: fn,
		probe: func() error { return features.HaveProgramHelper(ebpf.XDP, fn) }}
}

func mapProbe(name string, mt ebpf.MapType, forWhat, since string) featureProbe {
	return featureProbe{name: name, forWhat: forWhat, since: since, mapType: mt,
		probe: func() error { return features.HaveMapType(mt) }}
}

// kernelFeatures is everything the datapath uses that kernels older than
// XDP itself (4.8) may lack. Helpers and map types every XDP kernel has
// (map lookups, plain arrays and hashes, bpf_ktime_get_ns) are left out.
var kernelFeatures = []featureProbe{
	{name: "XDP programs", forWhat: "the datapath", since: "4.8",
		probe: func() error { return features.HaveProgramType(ebpf.XDP) }},
	{name: "eBPF v3 ISA (32-bit jumps)", forWhat: "the compiled datapath (clang -mcpu=v3)", since: "5.1",
		probe: features.HaveV3ISA},
	{name: "atomic compare-and-exchange", forWhat: "updating shared per-source state", since: "5.12",
		probe: probeCmpXchg},
	{name: "1M-instruction verifier budget", forWhat: "the datapath's size", since: "5.2",
		probe: features.HaveLargeInstructions},
	{name: "bounded loops", forWhat: "the datapath's loops", since: "5.3",
		probe: features.HaveBoundedLoops},
	{name: "program BTF with static functions", forWhat: "bpf_loop callbacks", since: "5.6",
		probe: probeProgramBTF},
	{name: "read-only global data", forWhat: "load-time settings", since: "5.2",
		probe: func() error { return features.HaveMapFlag(features.BPF_F_RDONLY_PROG) }},
	mapProbe("LRU hash maps", ebpf.LRUHash, "the per-source state table", "4.10"),
	mapProbe("LPM trie maps", ebpf.LPMTrie, "allow/deny lists, bans and CIDR matches", "4.11"),
	mapProbe("per-CPU arrays", ebpf.PerCPUArray, "counters", "4.6"),
	mapProbe("ring buffers", ebpf.RingBuf, "fleet limits' admitted keys", "5.8"),
	helperProbe("bpf_ringbuf_reserve", asm.FnRingbufReserve, "fleet limits' admitted keys", "5.8"),
	helperProbe("bpf_ringbuf_submit", asm.FnRingbufSubmit, "fleet limits' admitted keys", "5.8"),
	helperProbe("bpf_jiffies64", asm.FnJiffies64, "the cheap clock", "5.5"),
	helperProbe("bpf_ktime_get_coarse_ns", asm.FnKtimeGetCoarseNs, "aligning the cheap clock", "5.11"),
	helperProbe("bpf_loop", asm.FnLoop, "walking long VLAN tag stacks and applying fleet limits", "5.17"),
	helperProbe("bpf_xdp_load_bytes", asm.FnXdpLoadBytes, "walking long VLAN tag stacks and reading a SYN to answer", "5.18"),
	helperProbe("bpf_xdp_store_bytes", asm.FnXdpStoreBytes, "writing SYN-ACKs", "5.18"),
	helperProbe("bpf_xdp_get_buff_len", asm.FnXdpGetBuffLen, "sizing SYN-ACKs", "5.18"),
	helperProbe("bpf_xdp_adjust_tail", asm.FnXdpAdjustTail, "sizing SYN-ACKs", "4.18"),
	helperProbe("bpf_skc_lookup_tcp", asm.FnSkcLookupTcp, "SYN cookies and conversation checks (finding the socket)", "5.2"),
	helperProbe("bpf_sk_lookup_udp", asm.FnSkLookupUdp, "conversation checks (finding a UDP socket)", "4.20"),
	helperProbe("bpf_sk_release", asm.FnSkRelease, "SYN cookies and conversation checks", "4.20"),
	helperProbe("bpf_tcp_raw_gen_syncookie_ipv4", asm.FnTcpRawGenSyncookieIpv4, "SYN cookies", "6.0"),
	helperProbe("bpf_tcp_raw_gen_syncookie_ipv6", asm.FnTcpRawGenSyncookieIpv6, "SYN cookies", "6.0"),
	helperProbe("bpf_tcp_raw_check_syncookie_ipv4", asm.FnTcpRawCheckSyncookieIpv4, "SYN cookies", "6.0"),
	helperProbe("bpf_tcp_raw_check_syncookie_ipv6", asm.FnTcpRawCheckSyncookieIpv6, "SYN cookies", "6.0"),
	helperProbe("bpf_csum_diff", asm.FnCsumDiff, "answering limited sources (action reject)", "4.6"),
	// The reflection guard's request recorder, loaded only with the guard.
	{name: "TC programs (sched_cls) with bpf_skb_load_bytes", forWhat: "the reflection guard's request recorder on the egress",
		since: "4.5", optional: true, probe: func() error { return features.HaveProgramHelper(ebpf.SchedCLS, asm.FnSkbLoadBytes) }},
	// Conntrack's kfuncs are weak in the datapath: without them (or without
	// the kernel's BTF, which resolves them) forwarded traffic cannot be
	// judged by conntrack, and a policy that asks is refused.
	{name: "conntrack lookups from XDP (bpf_xdp_ct_lookup, nf_conntrack)",
		forWhat: "conversation checks of forwarded traffic (forwarded: conntrack)", since: "6.0", optional: true,
		probe: maps.ConntrackLookups},
	// Only CO-RE relocations and kfunc calls need the kernel's own BTF; the
	// datapath has neither but weak kfuncs (a test checks), so kernels built
	// without CONFIG_DEBUG_INFO_BTF run it.
	{name: "kernel BTF (/sys/kernel/btf/vmlinux)", forWhat: "CO-RE relocations and kfuncs (conntrack lookups only)", since: "5.4",
		optional: true, probe: probeKernelBTF},
}

// ProbeKernel probes everything the datapath uses. It is cheap (each probe
// loads a tiny program or creates a tiny map once; results are cached).
func ProbeKernel() []Feature {
	fs := make([]Feature, 0, len(kernelFeatures))
	for _, p := range kernelFeatures {
		f := Feature{Name: p.name, For: p.forWhat, Since: p.since, Optional: p.optional}
		if err := p.probe(); errors.Is(err, ebpf.ErrNotSupported) {
			f.Err = err
		} else if err != nil {
			f.Err = fmt.Errorf("probe failed: %w", err)
		}
		fs = append(fs, f)
	}
	return fs
}

// CheckKernel returns a clear error naming every missing capability, or
// nil. attach runs it before loading, so an old kernel gets this message
// rather than a verifier log.
func CheckKernel() error {
	return checkFeatures(kernelRelease(), ProbeKernel())
}

// checkFeatures is CheckKernel over given probe results.
func checkFeatures(release string, fs []Feature) error {
	var missing []string
	for _, f := range fs {
		if f.Err != nil && !f.Optional {
			missing = append(missing, fmt.Sprintf("%s (Linux %s, for %s): %v", f.Name, f.Since, f.For, f.Err))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("this kernel (%s) lacks what xdplimit needs; it needs Linux %s or newer, with BPF and XDP enabled:\n  %s",
		release, MinimumKernel, strings.Join(missing, "\n  "))
}

func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown release"
	}
	return "Linux " + unix.ByteSliceToString(u.Release[:])
}

// probeCmpXchg loads a program with a 64-bit compare-and-exchange on its
// stack: the instruction the limiters update shared state with.
func probeCmpXchg() error {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type: ebpf.XDP,
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R1, 0),
			asm.StoreMem(asm.RFP, -8, asm.R1, asm.DWord),
			asm.Mov.Imm(asm.R0, 0),
			asm.Mov.Imm(asm.R2, 1),
			asm.CmpXchg.Mem(asm.RFP, asm.R2, asm.DWord, -8),
			asm.Mov.Imm(asm.R0, 2), // XDP_PASS
			asm.Return(),
		},
		License: "Dual BSD/GPL",
	})
	if err != nil {
		var verr *ebpf.VerifierError
		if errors.Is(err, unix.EINVAL) || errors.As(err, &verr) {
			return fmt.Errorf("%w: %v", ebpf.ErrNotSupported, err)
		}
		return err
	}
	return prog.Close()
}

// probeProgramBTF loads BTF holding a static function, as the datapath's
// bpf_loop callbacks carry: the verifier refuses a callback without it.
func probeProgramBTF() error {
	b, err := btf.NewBuilder([]btf.Type{&btf.Func{Name: "cb", Type: &btf.FuncProto{Return: (*btf.Void)(nil)}, Linkage: btf.StaticFunc}}, nil)
	if err != nil {
		return err
	}
	h, err := btf.NewHandle(b)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, ebpf.ErrNotSupported) {
		return fmt.Errorf("%w: %v", ebpf.ErrNotSupported, err)
	}
	if err != nil {
		return err
	}
	return h.Close()
}

func probeKernelBTF() error {
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: kernel built without CONFIG_DEBUG_INFO_BTF", ebpf.ErrNotSupported)
	} else if err != nil {
		return err
	}
	return nil
}
