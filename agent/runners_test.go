// SPDX-License-Identifier: Apache-2.0

package agent_test

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/agent"
	"github.com/xdplimit/xdplimit/droplog"
	"github.com/xdplimit/xdplimit/fleet"
	"github.com/xdplimit/xdplimit/gen"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
)

// dropLines reads the drop lines of a drop log file (none if it is absent).
func dropLines(t *testing.T, path string) []droplog.Line {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []droplog.Line
	for _, s := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var l droplog.Line
		if s == "" || json.Unmarshal([]byte(s), &l) != nil || l.Event != "drop" {
			continue
		}
		out = append(out, l)
	}
	return out
}

// TestAgentDropLog: a policy's log: section starts the drop log, which
// writes a line for each drop to the file it names; a reload without the
// section stops it. Drops come from the attached program run on frames with
// BPF_PROG_TEST_RUN: no traffic.
func TestAgentDropLog(t *testing.T) {
	testutil.RequireRoot(t)
	v := newVeth(t)
	iface := v.PeerName
	path := policyFile(t, dnsPolicy+"log: {sample: 1, file: drops.jsonl}\n")
	out := filepath.Join(filepath.Dir(path), "drops.jsonl")
	a := startAgent(t, v, agent.Config{Policy: path})

	verdicts(t, iface, dnsFrame, 10) // the burst's one passes, nine drop
	if !eventually(testutil.MachineWait, func() bool { return len(dropLines(t, out)) >= 9 }) {
		t.Fatalf("%d drop lines within 5 s, want 9:\n%s", len(dropLines(t, out)), a.logs)
	}
	for _, l := range dropLines(t, out) {
		if l.Interface != iface || l.Rule != "dns" || l.Action != "drop" || l.Src != "192.0.2.7" ||
			l.Proto != "udp" || l.DstPort == nil || *l.DstPort != 53 {
			t.Errorf("line %+v: want a drop by rule dns of 192.0.2.7 to udp port 53 on %s", l, iface)
		}
	}

	writePolicy(t, path, dnsPolicy)
	if err := a.Reload("test"); err != nil {
		t.Fatal(err)
	}
	verdicts(t, iface, dnsFrame, 10)
	time.Sleep(300 * time.Millisecond) // three of the log's polls
	if n := len(dropLines(t, out)); n != 9 {
		t.Errorf("%d drop lines after the log: section went, want still 9", n)
	}
	if !strings.Contains(a.logs.String(), "drop log started") {
		t.Errorf("no start logged:\n%s", a.logs)
	}
}

// fleetPolicy is dnsPolicy's rule as a fleet level shared through the Redis
// at addr, under a namespace of its own, with a fixed window (whose reserve
// a sync sets once it knows of other hosts).
func fleetPolicy(addr string) string {
	id := make([]byte, 4)
	_, _ = rand.Read(id)
	return fmt.Sprintf(`fleet:
  redis: [redis://%s/0]
  namespace: agent-%s
  sync: 50ms
rules:
  - name: dns
    match: {protocol: udp, dst_ports: [53]}
    limit: {algorithm: fixed_window, packets: 1000, window: 1m, scope: fleet}
`, addr, hex.EncodeToString(id))
}

// startRedis starts a redis-server of the test's own on loopback in ns.
func startRedis(t *testing.T, ns *testutil.Netns) *testutil.RedisServer {
	t.Helper()
	return testutil.StartRedis(t, ns, testutil.RedisConfig{Addr: netip.MustParseAddrPort("127.0.0.1:6379")})
}

// waitFleetUp waits until the status file of iface says Redis answers.
func waitFleetUp(t *testing.T, a *running, iface string) fleet.Status {
	t.Helper()
	var st fleet.Status
	ok := eventually(testutil.MachineWait, func() bool {
		var err error
		st, err = agent.ReadFleetStatus(iface)
		return err == nil && st.Up
	})
	if !ok {
		t.Fatalf("fleet status of %s not up within 10 s: %+v\n%s", iface, st, a.logs)
	}
	return st
}

// TestAgentFleetStatus: the fleet sync runs against a real redis-server and
// keeps the status file that `xdplimit status` reads; a reload without the
// fleet: section stops the sync and removes the file, one with it starts
// them again, and the stop removes the file.
func TestAgentFleetStatus(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireRedis(t)
	v := newVeth(t)
	iface := v.PeerName
	r := startRedis(t, v.PeerNS)
	fleetYAML := fleetPolicy(r.Addr())
	path := policyFile(t, fleetYAML)
	a := startAgent(t, v, agent.Config{Policy: path, FleetDialer: testutil.DialIn(v.PeerNS)})

	st := waitFleetUp(t, a, iface)
	if st.Levels != 1 || !slices.Equal(st.Redis, []string{"redis://" + r.Addr() + "/0"}) ||
		!strings.HasPrefix(st.Namespace, "agent-") || st.Sync != "50ms" {
		t.Errorf("status %+v: want 1 level, the test's Redis and namespace, sync 50ms", st)
	}
	if !strings.Contains(a.logs.String(), "fleet sync started") {
		t.Errorf("no start logged:\n%s", a.logs)
	}

	writePolicy(t, path, dnsPolicy)
	if err := a.Reload("test"); err != nil {
		t.Fatal(err)
	}
	if _, err := agent.ReadFleetStatus(iface); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("status after the fleet: section went: %v, want no file", err)
	}
	writePolicy(t, path, fleetYAML)
	if err := a.Reload("test"); err != nil {
		t.Fatal(err)
	}
	waitFleetUp(t, a, iface)

	if err := a.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, err := os.Stat(agent.FleetStatusPath(iface)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("status file after the stop: %v, want it removed", err)
	}
}

// reserves counts the fleet reserves set in the pinned maps of iface.
func reserves(t *testing.T, iface string) int {
	t.Helper()
	m := pinned(t, iface).Limiter.Map(gen.XdplimitMapXdplFleetReserve)
	var k uint32
	var v uint64
	n := 0
	for it := m.Iterate(); it.Next(&k, &v); {
		n++
	}
	return n
}

// TestAgentExitReleasesFleetReserves: an agent leaving the limiter
// behind stops its fleet sync while the maps are still open, so the sync
// releases what its fixed windows held for the other hosts: no sync runs
// after it, and the limiter then enforces the whole limit from local state,
// as docs/policy.md says. Two agents on two interfaces make a fleet of two.
func TestAgentExitReleasesFleetReserves(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireRedis(t)
	v := newVeth(t)
	w := testutil.NewUniqueVethPair(t, "xag2s", "xag2r")
	r := startRedis(t, v.PeerNS)
	pol := fleetPolicy(r.Addr())
	dial := testutil.DialIn(v.PeerNS)
	a := startKeeping(t, v, agent.Config{Policy: policyFile(t, pol), FleetDialer: dial})
	startAgent(t, w, agent.Config{Policy: policyFile(t, pol), FleetDialer: dial})
	if !eventually(testutil.MachineWait, func() bool { return reserves(t, v.PeerName) > 0 }) {
		t.Fatalf("no fleet reserve on %s within 10 s: the fleet of two did not form\n%s", v.PeerName, a.logs)
	}
	if err := a.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := reserves(t, v.PeerName); n != 0 {
		t.Errorf("%d fleet reserves left in the pinned maps after the agent exited", n)
	}
	if err := agent.Detach(v.PeerName); err != nil {
		t.Fatal(err)
	}
}
