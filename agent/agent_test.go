// SPDX-License-Identifier: Apache-2.0

package agent_test

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xdplimit/xdplimit/agent"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/loader"
	"github.com/xdplimit/xdplimit/policy"
)

// Policies for the tests: none that limits DNS, one that lets one DNS packet
// per source through a minute (slow enough that no test sees a refill), one
// with a warning and one with an error.
const (
	openPolicy = "rules:\n  - name: open\n    match: {protocol: tcp}\n    limit: {algorithm: token_bucket, rate: 1000/s, burst: 1000}\n"
	dnsPolicy  = `rules:
  - name: dns
    match: {protocol: udp, dst_ports: [53]}
    limit: {algorithm: token_bucket, rate: 1/m, burst: 1}
`
	warnPolicy = "allow: [192.0.2.1/24]\nrules: []\n"
	badPolicy  = "rules:\n  - name: dns\n    limit: {rate: 1000/sec}\n"
)

func badError(path string) string {
	return path + ":3:12: rules[0].limit: algorithm is required: token_bucket, fixed_window, sliding_window or sliding_log"
}

// TestAgentStartStop: Start attaches natively, records the policy and this
// process in the pins and serves /metrics and /healthz on the port it was
// given (port 0: one it picked); when Run's context ends, the limiter is
// detached, its pins and lock file removed and the port closed, and the
// agent refuses further reloads.
func TestAgentStartStop(t *testing.T) {
	testutil.RequireRoot(t)
	v := newVeth(t)
	path := policyFile(t, dnsPolicy)
	a := startAgent(t, v, agent.Config{Policy: path, MetricsAddr: "127.0.0.1:0"})
	iface := v.PeerName

	if a.Interface() != iface || a.Mode() != loader.ModeNative || a.Adopted() {
		t.Errorf("attached to %s in %s mode, adopted %v; want %s, native, false", a.Interface(), a.Mode(), a.Adopted(), iface)
	}
	s := pinned(t, iface)
	if s.Meta.PolicyPath != path || s.Meta.PolicySHA256 != sha256.Sum256([]byte(dnsPolicy)) {
		t.Errorf("pinned policy %s (sha256 %x), want %s", s.Meta.PolicyPath, s.Meta.PolicySHA256, path)
	}
	if s.Meta.Pid != uint32(os.Getpid()) || !loader.OwnerAlive(s.Meta.Pid) {
		t.Errorf("owner pid %d, want this process (%d)", s.Meta.Pid, os.Getpid())
	}
	if id := v.PeerNS.XDPProgID(t, iface); id == 0 || id != uint32(s.ProgramID) {
		t.Errorf("XDP program on %s: id %d, want the pinned link's %d", iface, id, s.ProgramID)
	}

	addr := a.MetricsAddr()
	if addr == nil || strings.HasSuffix(addr.String(), ":0") {
		t.Fatalf("metrics address %v, want the port picked", addr)
	}
	c := httpIn(v.PeerNS)
	if code, body := get(t, c, "http://"+addr.String()+"/healthz"); code != 200 || body != "ok\n"+iface+": ok\n" {
		t.Errorf("/healthz: %d %q, want 200 ok", code, body)
	}
	want := fmt.Sprintf(`xdplimit_policy_reloads_total{interface=%q,result="success"} 0`, iface)
	if code, body := get(t, c, "http://"+addr.String()+"/metrics"); code != 200 || !strings.Contains(body, want) {
		t.Errorf("/metrics: %d, no %s in:\n%s", code, want, body)
	}

	if err := a.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, err := loader.Open(iface); !errors.Is(err, loader.ErrNotAttached) {
		t.Errorf("after the stop: %v, want not attached", err)
	}
	if id := v.PeerNS.XDPProgID(t, iface); id != 0 {
		t.Errorf("XDP program %d still on %s", id, iface)
	}
	for _, p := range []string{filepath.Join(loader.RunDir(), iface+".lock"), agent.ControlSocket(iface)} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s: %v, want it removed", p, err)
		}
	}
	if _, err := c.Get("http://" + addr.String() + "/metrics"); err == nil {
		t.Error("metrics still served after the stop")
	}
	if err := a.Reload("test"); !errors.Is(err, agent.ErrStopped) {
		t.Errorf("Reload after the stop: %v, want ErrStopped", err)
	}
}

// TestAgentStartFails: whatever stops Start leaves nothing behind: no
// program on the interface, no pins, no lock file, and the metrics port
// free again. Policy errors keep their file, line and column, and a
// policy's warnings reach Warnings before the attach fails.
func TestAgentStartFails(t *testing.T) {
	testutil.RequireRoot(t)
	v := newVeth(t)
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		writePolicy(t, p, body)
		return p
	}
	good, warn, bad := write("good.yaml", dnsPolicy), write("warn.yaml", warnPolicy), write("bad.yaml", badPolicy)
	taken := freePort(t, v.PeerNS)
	var ln net.Listener
	if err := v.PeerNS.Do(func() (err error) { ln, err = net.Listen("tcp", taken); return err }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	for _, c := range []struct {
		name     string
		cfg      agent.Config
		err      string
		warnings string
	}{
		{name: "policy with errors", cfg: agent.Config{Policy: bad}, err: badError(bad)},
		{name: "missing policy file", cfg: agent.Config{Policy: good + ".missing"},
			err: "open " + good + ".missing: no such file or directory"},
		{name: "no policy file", cfg: agent.Config{}, err: "no policy file"},
		{name: "metrics port taken", cfg: agent.Config{Policy: good, MetricsAddr: taken},
			err: "--metrics-addr: listen tcp " + taken + ": bind: address already in use, and no xdplimit attach process serves it"},
		{name: "no such interface", cfg: agent.Config{Policy: warn, Interface: "xagnone0"},
			err:      `interface "xagnone0": Link not found`,
			warnings: "warning: " + warn + ":1:9: allow[0]: 192.0.2.1/24 is masked to 192.0.2.0/24\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.cfg.MetricsAddr == "" {
				c.cfg.MetricsAddr = freePort(t, v.PeerNS)
			}
			var warnings testutil.SyncBuffer
			c.cfg.Warnings = &warnings
			a, logs, err := tryStart(t, v, c.cfg)
			if err == nil || err.Error() != c.err {
				t.Fatalf("Start: %v (agent %v), want %q\n%s", err, a, c.err, logs)
			}
			if warnings.String() != c.warnings {
				t.Errorf("warnings %q, want %q", warnings.String(), c.warnings)
			}
			if id := v.PeerNS.XDPProgID(t, v.PeerName); id != 0 {
				t.Errorf("XDP program %d on %s", id, v.PeerName)
			}
			for _, p := range []string{filepath.Join(loader.PinRoot, v.PeerName), filepath.Join(loader.RunDir(), v.PeerName+".lock"),
				agent.ControlSocket(v.PeerName)} {
				if _, err := os.Stat(p); !os.IsNotExist(err) {
					t.Errorf("%s: %v, want it absent", p, err)
				}
			}
			if c.cfg.MetricsAddr != taken {
				err := v.PeerNS.Do(func() error {
					ln, err := net.Listen("tcp", c.cfg.MetricsAddr)
					if err == nil {
						ln.Close()
					}
					return err
				})
				if err != nil {
					t.Errorf("metrics port not released: %v", err)
				}
			}
		})
	}
}

// TestAgentReload: a reload applies a changed policy as one switch and says
// so; a broken one returns its errors with file, line and column, and the
// previous policy stays in force. Verdicts come from the attached program
// run on a frame with BPF_PROG_TEST_RUN.
func TestAgentReload(t *testing.T) {
	testutil.RequireRoot(t)
	v := newVeth(t)
	path := policyFile(t, openPolicy)
	var warnings testutil.SyncBuffer
	a := startAgent(t, v, agent.Config{Policy: path, Warnings: &warnings})
	iface := v.PeerName
	if got := verdicts(t, iface, dnsFrame, 3); got[0] != xdpPass || got[1] != xdpPass || got[2] != xdpPass {
		t.Fatalf("DNS under the open policy: verdicts %v, want all pass", got)
	}

	writePolicy(t, path, dnsPolicy)
	if err := a.Reload("test"); err != nil {
		t.Fatalf("reload: %v", err)
	}
	if !hasRule(t, iface, "dns") || hasRule(t, iface, "open") {
		t.Errorf("rules in force %v, want the new policy's", ruleNames(t, iface))
	}
	if got := verdicts(t, iface, dnsFrame, 3); got[0] != xdpPass || got[1] != xdpDrop || got[2] != xdpDrop {
		t.Errorf("DNS after the reload: verdicts %v, want pass (the burst), drop, drop", got)
	}
	if !strings.Contains(a.logs.String(), `msg=reloaded policy=`+path+` trigger=test`) {
		t.Errorf("no reload logged:\n%s", a.logs)
	}

	writePolicy(t, path, badPolicy)
	err := a.Reload("test")
	var list policy.ErrorList
	if !errors.As(err, &list) || err.Error() != badError(path) {
		t.Fatalf("reload of a broken policy: %v, want %s", err, badError(path))
	}
	if s := pinned(t, iface); !hasRule(t, iface, "dns") || s.Meta.PolicySHA256 != sha256.Sum256([]byte(dnsPolicy)) {
		t.Errorf("after a failed reload: rules %v, policy sha256 %x; want the previous policy", ruleNames(t, iface), s.Meta.PolicySHA256)
	}
	if !strings.Contains(a.logs.String(), "reload failed; the previous policy stays in force") {
		t.Errorf("no failure logged:\n%s", a.logs)
	}

	writePolicy(t, path, warnPolicy)
	if err := a.Reload("test"); err != nil {
		t.Fatalf("reload: %v", err)
	}
	if want := "warning: " + path + ":1:9: allow[0]: 192.0.2.1/24 is masked to 192.0.2.0/24\n"; !strings.Contains(warnings.String(), want) {
		t.Errorf("warnings %q, want %q", warnings.String(), want)
	}
}

// TestAgentWatch: with Watch, saving the policy file reloads it, with no
// call; a saved broken file is refused and the previous policy stays.
func TestAgentWatch(t *testing.T) {
	testutil.RequireRoot(t)
	v := newVeth(t)
	path := policyFile(t, openPolicy)
	a := startAgent(t, v, agent.Config{Policy: path, Watch: true})
	iface := v.PeerName
	sha := func() [32]byte { return pinned(t, iface).Meta.PolicySHA256 }

	writePolicy(t, path, dnsPolicy)
	if !eventually(testutil.MachineWait, func() bool { return sha() == sha256.Sum256([]byte(dnsPolicy)) }) {
		t.Fatalf("the saved policy was not applied within 5 s:\n%s", a.logs)
	}
	if !hasRule(t, iface, "dns") || !strings.Contains(a.logs.String(), `trigger="file change"`) {
		t.Errorf("rules %v; log:\n%s", ruleNames(t, iface), a.logs)
	}

	writePolicy(t, path, badPolicy)
	if !eventually(testutil.MachineWait, func() bool { return strings.Contains(a.logs.String(), "reload failed") }) {
		t.Fatalf("the saved broken policy was not refused within 5 s:\n%s", a.logs)
	}
	if sha() != sha256.Sum256([]byte(dnsPolicy)) || !hasRule(t, iface, "dns") {
		t.Errorf("after a refused save: rules %v, want the previous policy", ruleNames(t, iface))
	}
}

// TestAgentExitKeeps: by default the limiter stays attached and pinned
// when Run returns, says so, and only the interface's lock and control
// socket are released; the next agent adopts it, and Detach removes it.
func TestAgentExitKeeps(t *testing.T) {
	testutil.RequireRoot(t)
	v := newVeth(t)
	iface := v.PeerName
	path := policyFile(t, dnsPolicy)
	a := startKeeping(t, v, agent.Config{Policy: path})
	verdicts(t, iface, dnsFrame, 1) // spends the source's burst
	if err := a.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !strings.Contains(a.logs.String(), "exiting; the limiter stays attached and enforcing the last policy; `xdplimit detach "+iface+"` removes it") {
		t.Errorf("no exit line saying the limiter stays:\n%s", a.logs)
	}
	s := pinned(t, iface)
	if id := v.PeerNS.XDPProgID(t, iface); id == 0 || id != uint32(s.ProgramID) {
		t.Errorf("XDP program on %s: id %d, want the pinned link's %d", iface, id, s.ProgramID)
	}
	for _, p := range []string{filepath.Join(loader.RunDir(), iface+".lock"), agent.ControlSocket(iface)} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s: %v, want it removed", p, err)
		}
	}
	if got := verdicts(t, iface, dnsFrame, 1); got[0] != xdpDrop {
		t.Errorf("with no agent: verdict %v, want the limiter still dropping (drop)", got)
	}

	b := startKeeping(t, v, agent.Config{Policy: path})
	if !b.Adopted() {
		t.Error("the second agent did not adopt the pinned limiter")
	}
	if got := verdicts(t, iface, dnsFrame, 1); got[0] != xdpDrop {
		t.Errorf("after the adoption: verdict %v, want drop (the source's state kept)", got)
	}
	if err := b.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if err := agent.Detach(iface); err != nil {
		t.Fatal(err)
	}
	if id := v.PeerNS.XDPProgID(t, iface); id != 0 {
		t.Errorf("XDP program %d still on %s after Detach", id, iface)
	}
	if _, err := loader.Open(iface); !errors.Is(err, loader.ErrNotAttached) {
		t.Errorf("after Detach: %v, want not attached", err)
	}
}
