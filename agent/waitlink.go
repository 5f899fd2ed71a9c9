// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/metrics"
)

// waitForInterface returns once iface exists in the calling thread's
// network namespace, or at once when it exists already or wait is 0 (the
// attach then reports it missing). It subscribes to the kernel's link
// notifications, so an interface that appears later (a hot-plugged NIC, a
// bond or VLAN created by the network setup after this unit started) is
// attached to as soon as it is there. wait bounds the wait (WaitForever:
// none); ctx ends it early.
func waitForInterface(ctx context.Context, iface string, wait time.Duration, log *slog.Logger, exp *metrics.Exporter) error {
	exists := func() bool {
		_, err := netlink.LinkByName(iface)
		var nf netlink.LinkNotFoundError
		return !errors.As(err, &nf) // another error: let the attach report it
	}
	if wait == 0 || exists() {
		return nil
	}
	updates := make(chan netlink.LinkUpdate, 64)
	done := make(chan struct{})
	defer close(done)
	subErr := make(chan error, 1)
	err := netlink.LinkSubscribeWithOptions(updates, done, netlink.LinkSubscribeOptions{
		ErrorCallback: func(err error) {
			select {
			case subErr <- err:
			default:
			}
		},
	})
	if err != nil {
		return fmt.Errorf("waiting for interface %s: %w", iface, err)
	}
	// It may have appeared between the first look and the subscription.
	if exists() {
		return nil
	}
	var timeout <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timeout = t.C
	}
	log.Info("waiting for the interface to appear", "interface", iface, "timeout", waitString(wait))
	exp.SetPending(iface, "waiting for the interface to appear")
	for {
		select {
		case u, ok := <-updates:
			if !ok {
				return fmt.Errorf("waiting for interface %s: the kernel's link notifications stopped", iface)
			}
			if u.Header.Type == unix.RTM_NEWLINK && u.Attrs().Name == iface {
				log.Info("the interface appeared", "interface", iface)
				exp.SetPending(iface, "not attached yet")
				return nil
			}
		case err := <-subErr:
			// Lost notifications (a full socket buffer): look instead.
			if exists() {
				return nil
			}
			log.Debug("link notifications", "err", err)
		case <-timeout:
			return fmt.Errorf("interface %q: did not appear within %v (--wait-for-interface)", iface, wait)
		case <-ctx.Done():
			return fmt.Errorf("interface %q: stopped waiting for it: %w", iface, ctx.Err())
		}
	}
}

func waitString(d time.Duration) string {
	if d < 0 {
		return "none"
	}
	return d.String()
}
