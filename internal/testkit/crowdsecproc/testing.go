// SPDX-License-Identifier: Apache-2.0

package crowdsecproc

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/netns"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
)

// What tests call: the server started and stopped with the test, the
// bouncers' keys and the decisions they share, each failure fatal. The
// rest of the package returns errors, so that these are its only uses of
// package testing.

// Require requires Debian's crowdsec binaries (crowdsec, cscli), which
// `make deps` unpacks into DefaultDir.
func Require(tb testing.TB) Binaries {
	tb.Helper()
	b, err := Find()
	testutil.Require(tb, err == nil, "%v", err)
	return b
}

// Start starts a CrowdSec Local API whose configuration, database and log
// live in a temporary directory, and waits until it answers. It is stopped
// by its PID in tb.Cleanup, which runs even when the test fails; the log
// is printed then.
func Start(tb testing.TB) *Server {
	tb.Helper()
	return StartIn(tb, nil)
}

// StartIn is Start in the test's namespace ns (nil: the caller's): the
// server listens on ns's loopback, and cscli runs there too.
func StartIn(tb testing.TB, ns *testutil.Netns) *Server {
	tb.Helper()
	bin := Require(tb)
	var n *netns.Netns
	if ns != nil {
		n = ns.Netns
	}
	// TempDir before Cleanup: cleanups run last-in first-out, so the
	// server is stopped before its directory is removed.
	s, err := NewIn(n, bin, tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := s.Stop(); err != nil {
			tb.Errorf("stop crowdsec: %v", err)
		}
		if tb.Failed() {
			tb.Logf("crowdsec output:\n%s", s.Output())
		}
	})
	if err := s.Start(); err != nil {
		tb.Fatalf("%v\n%s", err, s.Output())
	}
	return s
}

// Bouncer registers the bouncer name and returns its API key.
func (s *Server) Bouncer(tb testing.TB, name string) string {
	tb.Helper()
	key, err := s.AddBouncer(context.Background(), name)
	if err != nil {
		tb.Fatal(err)
	}
	return key
}

// KeyFile registers the bouncer name and returns the path of a file
// holding its key, as a policy's crowdsec.api_key_file names it.
func (s *Server) KeyFile(tb testing.TB, name string) string {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), name+".key")
	if err := os.WriteFile(path, []byte(s.Bouncer(tb, name)+"\n"), 0o600); err != nil {
		tb.Fatal(err)
	}
	return path
}

// Bulk is n ban decisions on the addresses 10.second.0.0 onwards, an hour
// long, with the reason "bulk": what Import sends in one call (n up to
// 65536).
func Bulk(second byte, n int) []Decision {
	ds := make([]Decision, n)
	for i := range ds {
		ds[i] = Decision{Value: fmt.Sprintf("10.%d.%d.%d", second, i>>8, i&255), Duration: time.Hour, Reason: "bulk"}
	}
	return ds
}
