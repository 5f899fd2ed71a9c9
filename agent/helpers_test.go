// SPDX-License-Identifier: Apache-2.0

package agent_test

// The agent of a test: started natively on the receiving end of a veth pair
// of the test's own, from inside that end's namespace (where Start looks the
// interface up and binds the metrics port), and run until the test stops it
// or ends.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/agent"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/loader"
	"github.com/xdplimit/xdplimit/pktgen"
)

// newVeth is a veth pair of the test's own; the agent attaches to PeerName.
func newVeth(t *testing.T) *testutil.Veth {
	t.Helper()
	return testutil.NewUniqueVethPair(t, "xags", "xagr")
}

// running is an agent whose Run goes on in a goroutine.
type running struct {
	*agent.Agent
	v    *testutil.Veth
	logs *testutil.SyncBuffer // the agent's log, when the test gave none

	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// startAgent starts an agent with cfg on v's receiving end, natively, with
// a small state table unless cfg sizes it, and runs it; it detaches when it
// stops (DetachOnExit), as the tests that do not test the exit expect. It
// stops when the test ends, if the test did not stop it; the cleanup then
// also removes whatever a failed test left pinned, so that the next test on
// the same interface name does not adopt it.
func startAgent(t *testing.T, v *testutil.Veth, cfg agent.Config) *running {
	t.Helper()
	cfg.DetachOnExit = true
	return run(t, v, cfg)
}

// startKeeping is startAgent for an agent that leaves the limiter attached
// when it stops, as `xdplimit attach` does: the cleanup detaches it after
// the stop, if the test did not.
func startKeeping(t *testing.T, v *testutil.Veth, cfg agent.Config) *running {
	t.Helper()
	cfg.DetachOnExit = false
	r := run(t, v, cfg)
	iface := r.Interface()
	t.Cleanup(func() {
		// Runs before run's cleanup: stop first, to release the lock.
		if err := r.stop(t); err != nil {
			t.Errorf("stop: %v", err)
		}
		if err := agent.Detach(iface); err != nil && !errors.Is(err, loader.ErrNotAttached) {
			t.Errorf("detach %s: %v", iface, err)
		}
	})
	return r
}

// run starts an agent with cfg (see startAgent) and runs it.
func run(t *testing.T, v *testutil.Veth, cfg agent.Config) *running {
	t.Helper()
	a, logs, err := tryStart(t, v, cfg)
	if err != nil {
		t.Fatalf("start: %v\n%s", err, logs)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Agent: a, v: v, logs: logs, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- a.Run(ctx) }()
	t.Cleanup(func() {
		if err := r.stop(t); err != nil {
			t.Errorf("stop: %v", err)
		}
		if t.Failed() {
			t.Logf("agent log:\n%s", logs)
		}
	})
	return r
}

// tryStart is agent.Start in v's receiving namespace, with the defaults of
// startAgent; the agent's log goes to the returned buffer unless cfg.Log is
// set.
func tryStart(t *testing.T, v *testutil.Veth, cfg agent.Config) (*agent.Agent, *testutil.SyncBuffer, error) {
	t.Helper()
	logs := &testutil.SyncBuffer{}
	if cfg.Interface == "" {
		cfg.Interface = v.PeerName
	}
	cfg.Mode = loader.ModeNative
	if cfg.MaxSources == 0 {
		cfg.MaxSources = 1 << 12
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(logs, nil))
	}
	var a *agent.Agent
	err := v.PeerNS.Do(func() error {
		var err error
		a, err = agent.Start(context.Background(), cfg)
		return err
	})
	t.Cleanup(func() { removeLeftovers(t, cfg.Interface) })
	return a, logs, err
}

// stop ends Run (once) and returns its result.
func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.once.Do(func() {
		r.cancel()
		select {
		case r.err = <-r.done:
		case <-time.After(testutil.MachineWait):
			r.err = fmt.Errorf("Run did not return within %v of its context ending", testutil.MachineWait)
		}
	})
	return r.err
}

// removeLeftovers detaches what a failed test left pinned on iface, and
// fails the test if there was anything.
func removeLeftovers(t *testing.T, iface string) {
	if _, err := os.Stat(filepath.Join(loader.PinRoot, iface)); err == nil {
		t.Errorf("%s: pins left behind; detaching", iface)
		if err := agent.Detach(iface); err != nil {
			t.Errorf("detach %s: %v", iface, err)
		}
	}
	removeFleetStatusFiles(iface)
}

// removeFleetStatusFiles removes the status file (and its temporary) of
// iface; the agent's own removal is checked where it matters.
func removeFleetStatusFiles(iface string) {
	p := agent.FleetStatusPath(iface)
	os.Remove(p)
	os.Remove(p + ".tmp")
}

// writePolicy writes a policy file as editors and deployment tools do:
// a temporary file renamed over the old one, so that a watcher sees one
// complete change.
func writePolicy(t *testing.T, path, body string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// policyFile writes body as p.yaml in a directory of the test's own.
func policyFile(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "p.yaml")
	writePolicy(t, path, body)
	return path
}

// pinned opens the pinned state of iface, as `xdplimit status` does.
func pinned(t *testing.T, iface string) *loader.State {
	t.Helper()
	s, err := loader.Open(iface)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// ruleNames are the names of the rules in force on iface.
func ruleNames(t *testing.T, iface string) []string {
	t.Helper()
	stats, err := pinned(t, iface).Limiter.RuleStats()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range stats {
		names = append(names, r.Name)
	}
	return names
}

// hasRule reports whether a rule of that name is in force on iface.
func hasRule(t *testing.T, iface, name string) bool {
	t.Helper()
	return slices.Contains(ruleNames(t, iface), name)
}

// XDP verdicts, as BPF_PROG_TEST_RUN returns them.
const (
	xdpDrop = 1
	xdpPass = 2
)

// dnsFrame is a UDP packet to port 53 from a test source.
var dnsFrame = pktgen.UDP4(netip.MustParseAddr("192.0.2.7"), netip.MustParseAddr("10.0.0.1"), 4000, 53, 10)

// verdicts runs the program attached to iface on frame n times with
// BPF_PROG_TEST_RUN, against the maps in force, and returns each verdict.
func verdicts(t *testing.T, iface string, frame []byte, n int) []uint32 {
	t.Helper()
	id := pinned(t, iface).ProgramID
	prog, err := ebpf.NewProgramFromID(id)
	if err != nil {
		t.Fatalf("program %d of %s: %v", id, iface, err)
	}
	defer prog.Close()
	var out []uint32
	for range n {
		ret, err := prog.Run(&ebpf.RunOptions{Data: frame, Repeat: 1})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ret)
	}
	return out
}

// httpIn is an HTTP client whose connections are made from ns.
func httpIn(ns *testutil.Netns) *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: testutil.DialIn(ns)}}
}

// get fetches a URL with c and returns the status code and body.
func get(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// freePort returns a loopback address with a port free in ns: ns belongs to
// the test, so nothing else takes the port before the test uses it.
func freePort(t *testing.T, ns *testutil.Netns) string {
	t.Helper()
	var addr string
	err := ns.Do(func() error {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		addr = ln.Addr().String()
		return ln.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// eventually polls cond every 20 ms until it holds or timeout passes.
func eventually(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}
