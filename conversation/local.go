// SPDX-License-Identifier: Apache-2.0

// Package conversation runs the conversation checks' control plane: it
// keeps the datapath's table of this host's local addresses in step with
// the local routing table, and arms the checks that act only under attack
// while what they would drop at some destination exceeds the policy's rate.
package conversation

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// LocalPrefixes returns the local routing table's local routes (the
// kernel's RTN_LOCAL, table 255) of both families in the calling thread's
// network namespace: each address of each interface, and the prefixes an
// operator routed as local (AnyIP, `ip route add local 192.0.2.0/24 dev lo`).
// These are what the stack delivers to its own sockets; broadcast and
// multicast routes are not among them.
func LocalPrefixes() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		routes, err := netlink.RouteListFiltered(family, &netlink.Route{Table: unix.RT_TABLE_LOCAL}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return nil, fmt.Errorf("listing the local routing table: %w", err)
		}
		for _, r := range routes {
			if r.Type != unix.RTN_LOCAL || r.Dst == nil {
				continue
			}
			if p, ok := prefixOf(r.Dst); ok {
				out = append(out, p)
			}
		}
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return slices.Compact(out), nil
}

func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	a = a.Unmap()
	if a.Is4() && ones > 32 {
		ones -= 96
	}
	return netip.PrefixFrom(a, ones).Masked(), true
}

// Resync is how often WatchLocal reads the whole table again, whatever the
// route notifications said: a notification lost to a full socket buffer
// must not leave the table wrong for long.
const Resync = 30 * time.Second

// WatchLocal calls apply with the local prefixes now, and again after each
// change of the routing tables (debounced by 100 ms) and every Resync,
// until ctx ends. It must run in the network namespace whose table it
// reads. Errors are logged: the table then stays as it was, and the checks
// judge by it (an address added meanwhile is not judged; one removed still
// is, against sockets that no longer receive for it).
func WatchLocal(ctx context.Context, apply func([]netip.Prefix) error, log *slog.Logger) {
	updates := make(chan netlink.RouteUpdate, 64)
	done := make(chan struct{})
	defer close(done)
	subscribed := netlink.RouteSubscribeWithOptions(updates, done, netlink.RouteSubscribeOptions{
		ErrorCallback: func(err error) { log.Warn("conversations: route notifications", "err", err) },
	}) == nil
	var last []netip.Prefix
	sync := func() {
		now, err := LocalPrefixes()
		if err == nil && slices.Equal(now, last) {
			return
		}
		if err == nil {
			err = apply(now)
		}
		if err != nil {
			log.Error("conversations: local addresses not updated; the checks judge by the previous table", "err", err)
			return
		}
		log.Info("conversations: local addresses", "prefixes", len(now))
		last = now
	}
	sync()
	resync := time.NewTicker(Resync)
	defer resync.Stop()
	var debounce <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-updates:
			if !ok {
				// The subscription ended (its socket failed): the
				// resync alone keeps the table from now on.
				updates, subscribed = nil, false
				log.Warn("conversations: route notifications ended; the local table is read every " + Resync.String())
				continue
			}
			if debounce == nil {
				debounce = time.After(100 * time.Millisecond)
			}
		case <-debounce:
			debounce = nil
			sync()
		case <-resync.C:
			sync()
		}
		_ = subscribed
	}
}
