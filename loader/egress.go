// SPDX-License-Identifier: Apache-2.0

package loader

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/maps"
)

// xdplimit's filter on an interface's egress: one per interface, named by
// this priority and handle under the clsact qdisc, so that an attach that
// adopts or migrates the limiter replaces it in place (one atomic change)
// and detach finds it. The priority is high in number (late) so that an
// operator's own egress filters run first and nothing of theirs is
// reordered; the program never drops or changes a packet.
const (
	egressPrio   = 0xc2d0
	egressHandle = 1
)

// syncEgress puts the limiter's egress program (the reflection guard's
// request recorder, bpf/egress.bpf.c) on the interface's egress when on,
// adding the clsact qdisc if the interface has none, or removes it when
// not on. The recorder must be in place before the guard judges a packet:
// an answer to a request it did not see is dropped.
func syncEgress(ifindex int, l *maps.Limiter, on bool) error {
	if !on {
		return removeEgress(ifindex)
	}
	prog, err := l.EgressProgram()
	if err != nil {
		return err
	}
	q := &netlink.GenericQdisc{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: ifindex, Handle: netlink.MakeHandle(0xffff, 0),
		Parent: netlink.HANDLE_CLSACT}, QdiscType: "clsact"}
	if err := netlink.QdiscAdd(q); err != nil && !errors.Is(err, unix.EEXIST) {
		if errors.Is(err, unix.ENOENT) {
			err = fmt.Errorf("%w: the kernel has no clsact qdisc (CONFIG_NET_SCH_INGRESS; modprobe sch_ingress)", err)
		}
		return fmt.Errorf("adding a clsact qdisc for the reflection guard's request recorder: %w", err)
	}
	f := &netlink.BpfFilter{FilterAttrs: egressFilterAttrs(ifindex), Fd: prog.FD(), Name: "xdpl_egress", DirectAction: true}
	if err := netlink.FilterReplace(f); err != nil {
		if errors.Is(err, unix.ENOENT) {
			err = fmt.Errorf("%w: the kernel has no BPF classifier (CONFIG_NET_CLS_BPF; modprobe cls_bpf)", err)
		}
		return fmt.Errorf("attaching the reflection guard's request recorder to the egress: %w", err)
	}
	return nil
}

func egressFilterAttrs(ifindex int) netlink.FilterAttrs {
	return netlink.FilterAttrs{LinkIndex: ifindex, Parent: netlink.HANDLE_MIN_EGRESS, Handle: egressHandle,
		Priority: egressPrio, Protocol: unix.ETH_P_ALL}
}

// removeEgress removes xdplimit's egress filter, if there is one; the
// clsact qdisc stays, as other programs may use it. An interface that is
// gone, or not in the calling thread's namespace, has none of ours to
// remove: call it from the interface's namespace.
func removeEgress(ifindex int) error {
	link, err := netlink.LinkByIndex(ifindex)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return nil
	}
	if err != nil {
		return err
	}
	filters, err := netlink.FilterList(link, netlink.HANDLE_MIN_EGRESS)
	if err != nil {
		// No clsact qdisc: no filter of ours either.
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("listing the egress filters: %w", err)
	}
	for _, f := range filters {
		a := f.Attrs()
		if a.Priority == egressPrio && a.Handle == egressHandle {
			if err := netlink.FilterDel(f); err != nil && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("removing the reflection guard's request recorder: %w", err)
			}
		}
	}
	return nil
}

// EgressAttached says whether xdplimit's egress filter is on the interface.
func EgressAttached(ifindex int) (bool, error) {
	link, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return false, err
	}
	filters, err := netlink.FilterList(link, netlink.HANDLE_MIN_EGRESS)
	if err != nil {
		return false, nil
	}
	for _, f := range filters {
		if a := f.Attrs(); a.Priority == egressPrio && a.Handle == egressHandle {
			return true, nil
		}
	}
	return false, nil
}
