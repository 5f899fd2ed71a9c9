// SPDX-License-Identifier: Apache-2.0

package conversation

import (
	"context"
	"log/slog"
	"net/netip"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
)

func ip(t *testing.T, ns *testutil.Netns, args ...string) {
	t.Helper()
	cmd := exec.Command("ip", append([]string{"-n", ns.Name()}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ip %v: %v\n%s", args, err, out)
	}
}

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

// TestLocalPrefixes reads a namespace's local routing table: the addresses
// of its interfaces (loopback's included) and a prefix routed as local,
// and not the broadcast routes beside them.
func TestLocalPrefixes(t *testing.T) {
	ns := testutil.NewNetns(t)
	ip(t, ns, "addr", "add", "198.51.100.1/24", "dev", "lo")
	ip(t, ns, "addr", "add", "2001:db8::1/64", "dev", "lo", "nodad")
	ip(t, ns, "route", "add", "local", "203.0.113.0/24", "dev", "lo")
	var got []netip.Prefix
	if err := ns.Do(func() error {
		var err error
		got, err = LocalPrefixes()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for _, want := range prefixes("127.0.0.0/8", "127.0.0.1/32", "198.51.100.1/32", "203.0.113.0/24", "::1/128", "2001:db8::1/128") {
		if !slices.Contains(got, want) {
			t.Errorf("local prefixes %v lack %v", got, want)
		}
	}
	for _, bcast := range prefixes("198.51.100.255/32", "127.255.255.255/32") {
		if slices.Contains(got, bcast) {
			t.Errorf("local prefixes %v hold the broadcast route %v", got, bcast)
		}
	}
}

// TestWatchLocal: an address added after the watch started reaches the
// table, through a route notification, long before the periodic resync.
func TestWatchLocal(t *testing.T) {
	ns := testutil.NewNetns(t)
	applied := make(chan []netip.Prefix, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = ns.Do(func() error {
			WatchLocal(ctx, func(p []netip.Prefix) error { applied <- p; return nil }, slog.New(slog.DiscardHandler))
			return nil
		})
	}()
	defer func() { cancel(); <-done }()
	want := netip.MustParsePrefix("192.0.2.10/32")
	first := <-applied
	if slices.Contains(first, want) {
		t.Fatalf("the first table %v already holds %v", first, want)
	}
	ip(t, ns, "addr", "add", "192.0.2.10/24", "dev", "lo")
	deadline := time.After(Resync / 2)
	for {
		select {
		case p := <-applied:
			if slices.Contains(p, want) {
				return
			}
		case <-deadline:
			t.Fatalf("%v did not reach the table within %v", want, Resync/2)
		}
	}
}
