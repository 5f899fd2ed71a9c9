// SPDX-License-Identifier: Apache-2.0

package maps

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// conntrackKfunc is the kfunc the datapath looks forwarded packets up
// with (bpf/conntrack.h).
const conntrackKfunc = "bpf_xdp_ct_lookup"

// ConntrackLookups says whether XDP programs loaded now can look up
// netfilter's connection tracking: Linux 6.0 or later, with nf_conntrack
// built in or loaded. The error says what is missing.
func ConntrackLookups() error {
	kernel, err := btf.LoadKernelSpec()
	if err != nil {
		return fmt.Errorf("conntrack lookups need the kernel's BTF: %w", err)
	}
	var fn *btf.Func
	if kernel.TypeByName(conntrackKfunc, &fn) == nil {
		return nil
	}
	mod, err := btf.LoadKernelModuleSpec("nf_conntrack")
	if errors.Is(err, fs.ErrNotExist) {
		return errors.New("conntrack lookups need the nf_conntrack module, which is not loaded (modprobe nf_conntrack)")
	}
	if err != nil {
		return fmt.Errorf("reading nf_conntrack's BTF: %w", err)
	}
	if mod.TypeByName(conntrackKfunc, &fn) == nil {
		return nil
	}
	return fmt.Errorf("this kernel's nf_conntrack has no %s for XDP programs (Linux 6.0 or later)", conntrackKfunc)
}

// conntrackOf is why the program of spec makes no conntrack lookups, or
// nil when it does: what setConstants decided.
func conntrackOf(spec *ebpf.CollectionSpec) error {
	var on uint32
	if err := spec.Variables["xdpl_conntrack"].Get(&on); err != nil {
		return err
	}
	if on == 1 {
		return nil
	}
	if err := ConntrackLookups(); err != nil {
		return err
	}
	return errors.New("conntrack lookups were not available when the program was loaded")
}

// checkConntrack refuses a policy that asks for conntrack lookups the
// loaded program cannot make: it resolved the kfunc when it was loaded,
// or it never will.
func (l *Limiter) checkConntrack(cv Conversations) error {
	if !cv.Conntrack() {
		return nil
	}
	if !l.conntrackKnown {
		l.conntrackErr, l.conntrackKnown = ConntrackLookups(), true
	}
	if l.conntrackErr == nil {
		return nil
	}
	if ConntrackLookups() == nil {
		return errors.New("conversations: nf_conntrack was loaded after xdplimit loaded its program, " +
			"which cannot look it up: detach and attach again")
	}
	return fmt.Errorf("conversations: forwarded: conntrack: %w", l.conntrackErr)
}
