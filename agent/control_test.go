// SPDX-License-Identifier: Apache-2.0

package agent_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xdplimit/xdplimit/agent"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/loader"
	"github.com/xdplimit/xdplimit/metrics"
)

// TestAgentControlSocket: the control socket says who runs, and a reload
// asked through it answers with the result: applied with the policy's
// warnings, or refused with the errors' file, line and column while the
// previous policy stays in force. A policy saved while the agent does not
// watch changes nothing until asked.
func TestAgentControlSocket(t *testing.T) {
	testutil.RequireRoot(t)
	v := newVeth(t)
	iface := v.PeerName
	path := policyFile(t, openPolicy)
	startAgent(t, v, agent.Config{Policy: path, MetricsAddr: freePort(t, v.PeerNS)})
	ctx := context.Background()

	info, err := agent.AskInfo(ctx, iface)
	if err != nil {
		t.Fatal(err)
	}
	if info.Pid != os.Getpid() || info.Interface != iface || !info.Attached || info.Policy != path || !info.MetricsHeld {
		t.Errorf("info %+v", info)
	}
	if st, err := os.Stat(agent.ControlSocket(iface)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("control socket: %v, mode %v; want 0600", err, st.Mode().Perm())
	}

	writePolicy(t, path, warnPolicy)
	// Not watched: a save alone is not applied. Three settle intervals
	// is more than a watcher would take to apply it.
	time.Sleep(1500 * time.Millisecond)
	if !hasRule(t, iface, "open") {
		t.Fatalf("a save was applied without a watch: rules %v", ruleNames(t, iface))
	}
	res, err := agent.AskReload(ctx, iface)
	want := path + ":1:9: allow[0]: 192.0.2.1/24 is masked to 192.0.2.0/24"
	if err != nil || !res.OK || res.Policy != path || len(res.Warnings) != 1 || res.Warnings[0] != want {
		t.Fatalf("reload: %+v, %v; want ok with warning %q", res, err, want)
	}
	if hasRule(t, iface, "open") {
		t.Errorf("reloaded, but rules %v", ruleNames(t, iface))
	}

	writePolicy(t, path, badPolicy)
	res, err = agent.AskReload(ctx, iface)
	if err != nil || res.OK || !res.Refused || res.Error != badError(path) {
		t.Fatalf("reload of a broken policy: %+v, %v; want refused with %q", res, err, badError(path))
	}
	if s := pinned(t, iface); s.Meta.PolicySHA256 != sha256.Sum256([]byte(warnPolicy)) {
		t.Error("a refused reload changed the policy in force")
	}
	if _, err := agent.AskReload(ctx, "xagnone0"); !errors.Is(err, agent.ErrNoAgent) {
		t.Errorf("reload of an interface without an agent: %v, want ErrNoAgent", err)
	}
}

// TestAgentWaitsForInterface: with WaitForInterface, Start waits for a
// missing interface (its control socket answering meanwhile, not attached),
// and attaches as soon as it appears; a bounded wait ends with an error
// that says so, and so does the end of Start's context; 0 fails at once.
func TestAgentWaitsForInterface(t *testing.T) {
	testutil.RequireRoot(t)
	v := newVeth(t)
	late := "xagl" + v.PeerName[len(v.PeerName)-4:]
	path := policyFile(t, dnsPolicy)
	logs := &testutil.SyncBuffer{}
	started := make(chan error, 1)
	var a *agent.Agent
	go func() {
		var err error
		a, _, err = tryStart(t, v, agent.Config{Interface: late, Policy: path, WaitForInterface: agent.WaitForever,
			DetachOnExit: true, Log: slog.New(slog.NewTextHandler(logs, nil))})
		started <- err
	}()
	if !eventually(testutil.MachineWait, func() bool { return strings.Contains(logs.String(), "waiting for the interface to appear") }) {
		t.Fatalf("no waiting logged:\n%s", logs)
	}
	if info, err := agent.AskInfo(context.Background(), late); err != nil || info.Attached {
		t.Errorf("while waiting: info %+v, %v; want an agent not attached", info, err)
	}
	// The interface appears: the veth end renamed to the awaited name.
	err := v.PeerNS.Do(func() error {
		l, err := netlink.LinkByName(v.PeerName)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetDown(l); err != nil {
			return err
		}
		if err := netlink.LinkSetName(l, late); err != nil {
			return err
		}
		return netlink.LinkSetUp(l)
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("Start: %v\n%s", err, logs)
		}
	case <-time.After(testutil.MachineWait):
		t.Fatalf("not attached %v after the interface appeared:\n%s", testutil.MachineWait, logs)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.Run(ctx); err != nil {
		t.Fatalf("Run: %v", err)
	}

	for _, c := range []struct {
		name string
		wait time.Duration
		ctx  func() context.Context
		err  string
	}{
		{"at once", 0, context.Background, `interface "xagnone0": Link not found`},
		{"bounded", 100 * time.Millisecond, context.Background,
			`interface "xagnone0": did not appear within 100ms (--wait-for-interface)`},
		{"stopped", agent.WaitForever, func() context.Context {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			t.Cleanup(cancel)
			return ctx
		}, `interface "xagnone0": stopped waiting for it: context deadline exceeded`},
	} {
		t.Run(c.name, func(t *testing.T) {
			var a *agent.Agent
			err := v.PeerNS.Do(func() (err error) {
				a, err = agent.Start(c.ctx(), agent.Config{Interface: "xagnone0", Policy: path, WaitForInterface: c.wait})
				return err
			})
			if err == nil || err.Error() != c.err {
				t.Errorf("Start: %v (agent %v), want %q", err, a, c.err)
			}
		})
	}
}

// TestAgentSharedMetrics: two agents on two interfaces of one network
// namespace, given the same metrics address: the first serves both, the
// second says who serves its series and does not fail; when the first
// stops, the second takes the address over.
func TestAgentSharedMetrics(t *testing.T) {
	testutil.RequireRoot(t)
	v := newVeth(t)
	id := testutil.UniqueID(t, "xag3s", "xag3r")
	w := testutil.NewVeth(t, v.NS, v.PeerNS, testutil.VethConfig{Name: "xag3s" + id, PeerName: "xag3r" + id,
		Addr: prefix("198.18.1.1/24"), PeerAddr: prefix("198.18.1.2/24"),
		Addr6: prefix("2001:2:0:1::1/64"), PeerAddr6: prefix("2001:2:0:1::2/64")})
	addr := freePort(t, v.PeerNS)
	a := startAgent(t, v, agent.Config{Policy: policyFile(t, dnsPolicy), MetricsAddr: addr})
	b := startAgent(t, w, agent.Config{Policy: policyFile(t, openPolicy), MetricsAddr: addr})
	if a.MetricsAddr() == nil || b.MetricsAddr() != nil {
		t.Fatalf("metrics held by %v and %v: want the first agent only", a.MetricsAddr(), b.MetricsAddr())
	}
	if !strings.Contains(b.logs.String(), "metrics served by the attach process holding the address") {
		t.Errorf("the second agent does not say who serves its metrics:\n%s", b.logs)
	}
	c := httpIn(v.PeerNS)
	scrapeBoth := func(want ...string) bool {
		code, body := get(t, c, "http://"+addr+"/metrics")
		if code != 200 {
			return false
		}
		for _, iface := range want {
			if !strings.Contains(body, fmt.Sprintf(`xdplimit_up{interface=%q} 1`, iface)) ||
				!strings.Contains(body, fmt.Sprintf(`go_goroutines{interface=%q}`, iface)) {
				return false
			}
		}
		return true
	}
	if !scrapeBoth(v.PeerName, w.PeerName) {
		_, body := get(t, c, "http://"+addr+"/metrics")
		t.Errorf("/metrics lacks one of %s, %s:\n%s", v.PeerName, w.PeerName, body)
	}
	// Lines by interface name: w's sorts first.
	want := fmt.Sprintf("ok\n%s: ok\n%s: ok\n", w.PeerName, v.PeerName)
	if code, body := get(t, c, "http://"+addr+"/healthz"); code != 200 || body != want {
		t.Errorf("/healthz: %d %q, want %q", code, body, want)
	}
	// One source: both interfaces answer, the second's through its
	// control socket.
	code, body := get(t, c, "http://"+addr+"/v1/sources/192.0.2.9")
	var src metrics.Sources
	if err := json.Unmarshal([]byte(body), &src); err != nil || code != 200 || len(src.Interfaces) != 2 ||
		src.Interfaces[0].Interface != w.PeerName || src.Interfaces[1].Interface != v.PeerName ||
		src.Interfaces[0].Error != "" || src.Interfaces[1].Error != "" {
		t.Errorf("/v1/sources: %d (%v):\n%s", code, err, body)
	}

	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
	if !eventually(testutil.MachineWait, func() bool { return b.MetricsAddr() != nil }) {
		t.Fatalf("the second agent did not take the address over:\n%s", b.logs)
	}
	if !eventually(testutil.MachineWait, func() bool { return scrapeBoth(w.PeerName) }) {
		t.Errorf("/metrics after the takeover lacks %s", w.PeerName)
	}
}

// TestAgentMigratesOtherPins: pins lacking a map this program uses are
// another program's: the agent carries their bans into new maps, swaps
// the program in the pinned link without detaching, and replaces the pins.
func TestAgentMigratesOtherPins(t *testing.T) {
	testutil.RequireRoot(t)
	v := newVeth(t)
	iface := v.PeerName
	path := policyFile(t, dnsPolicy)
	a := startKeeping(t, v, agent.Config{Policy: path})
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
	s := pinned(t, iface)
	if _, err := s.Limiter.Ban(prefix("198.51.100.0/24"), time.Hour, "scanner"); err != nil {
		t.Fatal(err)
	}
	oldProg := s.ProgramID
	dir := loader.PinRoot + "/" + iface
	// Pins it cannot carry over (no metadata): the running limiter stays
	// as it is, and the error says what to do.
	if err := os.Rename(dir+"/xdpl_meta", dir+"/aside"); err != nil {
		t.Fatal(err)
	}
	_, logs, err := tryStart(t, v, agent.Config{Policy: path})
	if err == nil || !strings.Contains(err.Error(), "The running limiter is unchanged and keeps enforcing") ||
		!strings.Contains(err.Error(), "`xdplimit detach "+iface+"`") {
		t.Errorf("start over pins without metadata: %v\n%s", err, logs)
	}
	if id := v.PeerNS.XDPProgID(t, iface); id != uint32(oldProg) {
		t.Errorf("program %d attached after a failed migration, want the old %d", id, oldProg)
	}
	if err := os.Rename(dir+"/aside", dir+"/xdpl_meta"); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(dir + "/xdpl_last"); err != nil {
		t.Fatal(err)
	}
	b := startKeeping(t, v, agent.Config{Policy: path})
	if !strings.Contains(b.logs.String(), "replaced a limiter of another map layout without a gap") {
		t.Errorf("no migration logged:\n%s", b.logs)
	}
	after := pinned(t, iface)
	bans, err := after.Limiter.Bans()
	if err != nil || len(bans) != 1 || bans[0].Prefix != prefix("198.51.100.0/24") || bans[0].Reason != "scanner" ||
		bans[0].Origin != "manual" {
		t.Fatalf("bans after the migration: %+v, %v", bans, err)
	}
	if after.ProgramID == oldProg || v.PeerNS.XDPProgID(t, iface) != uint32(after.ProgramID) {
		t.Errorf("program %d attached, pinned link's %d, old %d", v.PeerNS.XDPProgID(t, iface), after.ProgramID, oldProg)
	}
	if _, err := os.Stat(dir + "/xdpl_last"); err != nil {
		t.Errorf("the new pins lack xdpl_last: %v", err)
	}
}

func prefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }
