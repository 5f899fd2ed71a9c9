// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/compiler"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/loader"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/metrics"
	"github.com/xdplimit/xdplimit/policy"
)

func TestBanRefuses(t *testing.T) {
	cases := []cliCase{
		refused("not a CIDR", `"198.51.100.0/33" is not a CIDR (like 198.51.100.0/24 or 2001:db8::/48)`, "ban", noIface, "198.51.100.0/33"),
		refused("not an address", `"bogus" is not a CIDR (like 198.51.100.0/24 or 2001:db8::/48) or an address`, "ban", noIface, "bogus"),
		refused("too short", "--for: ban of 500ms is out of range; use 1s to 30d", "ban", noIface, "192.0.2.1", "--for", "500ms"),
		refused("too long", "--for: ban of 31d is out of range; use 1s to 30d", "ban", noIface, "192.0.2.1", "--for", "31d"),
		refused("long reason", fmt.Sprintf("--reason: reason longer than %d bytes", maps.BanReasonLen),
			"ban", noIface, "192.0.2.1", "--reason", strings.Repeat("x", maps.BanReasonLen+1)),
		refused("reason too long once escaped", `--reason: reason longer than 63 bytes once its control characters `+
			`are escaped (\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b)`,
			"ban", noIface, "192.0.2.1", "--reason", strings.Repeat("\x1b", 20)),
		refused("a feed's reason", `--reason: "crowdsec: x" starts as the crowdsec feed's bans do, which that feed `+
			`may lift or replace: word it otherwise`, "ban", noIface, "192.0.2.1", "--reason", "crowdsec: x"),
		refused("the fleet's reason", `--reason: "fleet: h1 ssh" starts as the fleet feed's bans do, which that feed `+
			`may lift or replace: word it otherwise`, "ban", noIface, "192.0.2.1", "--reason", "fleet: h1 ssh"),
		refused("no limiter", notAttached(t), "ban", noIface, "192.0.2.1"),
		refused("unban no limiter", notAttached(t), "unban", noIface, "192.0.2.1"),
		refused("unban not a CIDR", `"x" is not a CIDR (like 198.51.100.0/24 or 2001:db8::/48) or an address`, "unban", noIface, "x"),
		refused("bans no limiter", notAttached(t), "bans", noIface),
		refused("bans two args", "accepts 1 arg(s), received 2", "bans", noIface, "x"),
	}
	cases = append(cases, badNameCases("bans")...)
	for _, c := range badNameCases("ban") {
		c.args = append(c.args, "192.0.2.1")
		cases = append(cases, c)
	}
	runCases(t, cases)
}

// ban, bans and unban on pinned state with no attach process: the table
// changes, the datapath is told to look, and bad input changes nothing.
func TestBanPinnedState(t *testing.T) {
	testutil.Require(t, os.Geteuid() == 0, "needs root to attach")
	v := testutil.NewUniqueVethPair(t, "xbs", "xbr")
	attachOrphaned(t, v)
	iface := v.PeerName
	runCases(t, []cliCase{
		{name: "ban", args: []string{"ban", iface, "198.51.100.0/24", "--for", "1h", "--reason", "scanner"},
			stdout: iface + ": banned 198.51.100.0/24 for 1h0m0s\n"},
		refused("bad duration changes nothing", "--for: ban of 0s is out of range; use 1s to 30d", "ban", iface, "203.0.113.1", "--for", "0s"),
	})
	out, _, code := runCLI("bans", iface, "--json")
	var got []metrics.BanJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil || code != 0 {
		t.Fatalf("bans --json: %v (exit %d): %s", err, code, out)
	}
	if len(got) != 1 || got[0].Prefix != "198.51.100.0/24" || got[0].Origin != "manual" || got[0].Reason != "scanner" ||
		got[0].SecondsLeft <= 3590 || got[0].SecondsLeft > 3600 {
		t.Fatalf("bans: %+v", got)
	}
	out, _, _ = runCLI("bans", iface)
	if !strings.HasPrefix(out, "1 bans of 64\nPREFIX") || !strings.Contains(out, "198.51.100.0/24  manual  ") {
		t.Fatalf("bans:\n%s", out)
	}
	s, err := loader.Open(iface)
	if err != nil {
		t.Fatal(err)
	}
	on, err := s.Limiter.BanLookupOn()
	s.Close()
	if err != nil || !on {
		t.Fatalf("ban lookup on: %v %v", on, err)
	}
	runCases(t, []cliCase{
		{name: "unban", args: []string{"unban", iface, "198.51.100.0/24"}, stdout: iface + ": unbanned 198.51.100.0/24\n"},
		refused("unban again", iface+": 198.51.100.0/24 is not banned (see xdplimit bans "+iface+")", "unban", iface, "198.51.100.0/24"),
		{name: "none left", args: []string{"bans", iface}, stdout: "0 bans of 64\n"},
	})

	// Wider than bans.min_prefix (the defaults, which the policy in force
	// recorded): refused unless forced, saying what it covers.
	world := "0.0.0.0/0 covers every IPv4 address (4294967296 addresses)"
	runCases(t, []cliCase{
		refused("the world", "0.0.0.0/0 is wider than /8, the widest ban bans.min_prefix allows (the policy in force): "+
			world+"; give --force to ban it all the same", "ban", iface, "0.0.0.0/0"),
		refused("the world, IPv4-mapped", "0.0.0.0/0 is wider than /8, the widest ban bans.min_prefix allows (the policy in force): "+
			world+"; give --force to ban it all the same", "ban", iface, "::ffff:0.0.0.0/96"),
		refused("IPv6 /31", "2001:db8::/31 is wider than /32, the widest ban bans.min_prefix allows (the policy in force): "+
			"2001:db8::/31 covers 2^97 IPv6 addresses, 2001:db8:: to 2001:db9:ffff:ffff:ffff:ffff:ffff:ffff; give --force to ban it all the same",
			"ban", iface, "2001:db8::/31"),
		{name: "none banned", args: []string{"bans", iface}, stdout: "0 bans of 64\n"},
		{name: "forced", args: []string{"ban", iface, "0.0.0.0/0", "--for", "10s", "--force"},
			stdout: iface + ": --force: " + world + "; wider than bans.min_prefix /8, so not shared with a fleet\n" +
				iface + ": banned 0.0.0.0/0 for 10s\n"},
		{name: "unban the world", args: []string{"unban", iface, "0.0.0.0/0"}, stdout: iface + ": unbanned 0.0.0.0/0\n"},
		// A reason a terminal would act on is stored escaped, and said so.
		{name: "reason escaped", args: []string{"ban", iface, "203.0.113.9", "--reason", "\x1b]0;pwned\x07"},
			stdout: iface + ": --reason held control characters: stored as \\x1b]0;pwned\\x07\n" +
				iface + ": banned 203.0.113.9/32 for 10m0s\n"},
	})
	out, _, _ = runCLI("bans", iface, "--json")
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got) != 1 || got[0].Reason != `\x1b]0;pwned\x07` {
		t.Fatalf("bans --json: %v %+v", err, got)
	}
}

// attachOrphaned attaches goodPolicy to v's receiving end with a ban
// table of 64 and leaves it pinned as if attach had exited with
// --keep-on-exit: no owner to signal.
func attachOrphaned(t *testing.T, v *testutil.Veth) {
	p, err := policy.Parse("p.yaml", []byte(goodPolicy))
	if err != nil {
		t.Fatal(err)
	}
	img, err := compiler.Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	var a *loader.Attachment
	err = v.PeerNS.Do(func() error {
		a, err = loader.Attach(loader.Config{Interface: v.PeerName, Mode: loader.ModeGeneric, Clock: maps.ClockKtime,
			MaxSources: 1 << 12, MaxBans: 64, Policy: loader.Policy{Image: img, Path: "p.yaml"}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { loader.Detach(v.PeerName) })
	m, err := a.Limiter.Meta()
	if err != nil {
		t.Fatal(err)
	}
	m.Pid = 0
	if err := a.Limiter.SetMeta(m); err != nil {
		t.Fatal(err)
	}
	a.Close()
}

// ban with an attach process running: the control word is the process's,
// so ban asks it (SIGHUP) to re-apply its policy, which turns the ban
// lookup on because the table is no longer empty.
func TestBanRunningAttach(t *testing.T) {
	testutil.Require(t, os.Geteuid() == 0, "needs root to attach")
	bin := testutil.XdplimitBin(t)
	v := testutil.NewUniqueVethPair(t, "xbt", "xbu")
	iface := v.PeerName
	policyPath := writeFile(t, "p.yaml", goodPolicy)
	cmd := exec.Command("nsenter", "--net="+v.PeerNS.Path(), bin, "attach", iface, "--policy", policyPath,
		"--mode", "generic", "--metrics-addr", "", "--max-sources", "4096", "--max-bans", "64", "--watch")
	// A file, not a buffer: read on failure while the process still writes.
	logs := filepath.Join(t.TempDir(), "attach.log")
	logFile, err := os.Create(logs)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		loader.Detach(iface)
	})
	// Attached once the pins name this process.
	waitFor(t, "attach", func() bool {
		s, err := loader.Open(iface)
		if err != nil {
			return false
		}
		defer s.Close()
		return s.Meta.Pid == uint32(cmd.Process.Pid)
	}, logs)
	// A policy file broken in place: the reload fails and leaves lookups
	// off, and ban says so instead of reporting a ban that is not enforced.
	if err := os.WriteFile(policyPath, []byte("rules: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	runCases(t, []cliCase{refused("reload fails", fmt.Sprintf("198.51.100.0/24 banned, but the datapath may not look yet: "+
		"attach pid %d did not turn ban lookups on within 5s: its reload failed? (see its log; the ban is in the table "+
		"and takes effect at its next successful reload)", cmd.Process.Pid), "ban", iface, "198.51.100.0/24")})
	// Mended, the file is reloaded (the attach watches it) and the ban in
	// the table turns the lookup on.
	if err := os.WriteFile(policyPath, []byte(goodPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "ban lookup on", func() bool {
		s, err := loader.Open(iface)
		if err != nil {
			return false
		}
		defer s.Close()
		on, err := s.Limiter.BanLookupOn()
		return err == nil && on
	}, logs)
	runCases(t, []cliCase{{name: "ban, lookups on", args: []string{"ban", iface, "203.0.113.7"},
		stdout: iface + ": banned 203.0.113.7/32 for 10m0s\n"}})
}

func waitFor(t *testing.T, what string, ok func() bool, logs string) {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if ok() {
			return
		}
	}
	out, _ := os.ReadFile(logs)
	t.Fatalf("%s: not after 20 s; attach logged:\n%s", what, out)
}

// Without limits recorded in the pinned state (no policy applied yet) ban
// goes by the defaults, and says so.
func TestBanWidthDefaults(t *testing.T) {
	var out strings.Builder
	err := checkWidth(&out, "eth0", netip.MustParsePrefix("10.0.0.0/7"), maps.BanLimits{}, false)
	want := "10.0.0.0/7 is wider than /8, the widest ban bans.min_prefix allows (the default: no policy recorded one): " +
		"10.0.0.0/7 covers 33554432 IPv4 addresses, 10.0.0.0 to 11.255.255.255; give --force to ban it all the same"
	if err == nil || err.Error() != want || out.Len() != 0 {
		t.Fatalf("%v\nwant %s", err, want)
	}
	if err := checkWidth(&out, "eth0", netip.MustParsePrefix("10.0.0.0/8"), maps.BanLimits{}, false); err != nil {
		t.Fatal(err)
	}
	// A policy that lets feeds ban anything lets ban do so too.
	if err := checkWidth(&out, "eth0", netip.MustParsePrefix("::/0"), maps.BanLimits{Set: true}, false); err != nil || out.Len() != 0 {
		t.Fatalf("min_prefix 0: %v %q", err, out.String())
	}
}
