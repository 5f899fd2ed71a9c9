package testutil

import (
	"testing"

	"github.com/xdplimit/xdplimit/internal/netns"
	"github.com/xdplimit/xdplimit/internal/testkit/crowdsecproc"
)

// RequireCrowdsec requires Debian's crowdsec binaries (crowdsec, cscli),
// which `make deps` unpacks into crowdsecproc.DefaultDir.
func RequireCrowdsec(tb testing.TB) crowdsecproc.Binaries {
	tb.Helper()
	b, err := crowdsecproc.Find()
	Require(tb, err == nil, "%v", err)
	return b
}

// StartLAPI starts a CrowdSec Local API whose configuration, database and
// log live in a temporary directory, and waits until it answers. It is
// stopped by its PID in tb.Cleanup, which runs even when the test fails;
// the log is printed then.
func StartLAPI(tb testing.TB) *crowdsecproc.Server {
	tb.Helper()
	return StartLAPIIn(tb, nil)
}

// StartLAPIIn is StartLAPI in the test's namespace ns (nil: the caller's):
// the server listens on ns's loopback, and cscli runs there too.
func StartLAPIIn(tb testing.TB, ns *Netns) *crowdsecproc.Server {
	tb.Helper()
	bin := RequireCrowdsec(tb)
	var n *netns.Netns
	if ns != nil {
		n = ns.Netns
	}
	// TempDir before Cleanup: cleanups run last-in first-out, so the
	// server is stopped before its directory is removed.
	s, err := crowdsecproc.NewIn(n, bin, tb.TempDir())
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
