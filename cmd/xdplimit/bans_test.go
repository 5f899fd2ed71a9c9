// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/agent"
	"github.com/xdplimit/xdplimit/gen"
	"github.com/xdplimit/xdplimit/internal/command"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/loader"
	"github.com/xdplimit/xdplimit/metrics"
)

// terminalSafe fails for any byte of out a terminal would act on: C0
// controls but newline, DEL, and C1 controls, bidi overrides and isolates
// as runes.
func terminalSafe(t *testing.T, what, out string) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Errorf("%s: invalid UTF-8:\n%q", what, out)
	}
	for _, r := range out {
		if r < 0x20 && r != '\n' || r >= 0x7f && r <= 0x9f || r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069 {
			t.Errorf("%s: prints %U:\n%q", what, r, out)
			return
		}
	}
}

// The fleet's Redis filled with hostile bans, an attach syncing with it,
// a ban written raw into the pinned table by another root process, a
// policy file whose name holds an escape sequence: what `bans`, `bans
// --json` and `status` print holds no character a terminal acts on, and
// JSON stays the same JSON.
func TestBansHostileText(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireRedis(t)
	v := testutil.NewUniqueVethPair(t, "xbht", "xbhr")
	iface := v.PeerName
	r := testutil.StartRedis(t, v.PeerNS, testutil.RedisConfig{Addr: netip.MustParseAddrPort("127.0.0.1:6379")})
	namespace := fmt.Sprintf("bans-text-%d", time.Now().UnixNano())
	policy := writeFile(t, "p\x1b[2J\u202e.yaml", "fleet:\n  redis: redis://"+r.Addr()+"/0\n  namespace: "+namespace+
		"\n  sync: 50ms\n"+goodPolicy)
	var logs testutil.SyncBuffer
	startAgent(t, v, agent.Config{Policy: policy, MaxBans: 64, FleetDialer: testutil.DialIn(v.PeerNS),
		Log: slog.New(slog.NewTextHandler(&logs, nil))})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent log:\n%s", logs.String())
		}
	})

	const stored = `fleet: evil\u202ehost: \x1b]0;pwned\x07\x1b[2J\u009b31m`
	hsetHostileBans(t, v, r.Addr(), namespace)
	waitForBans(t, iface, "198.51.100.66/32")

	// Another root process writes a ban straight into the pinned table,
	// past every check on the way in.
	raw := "raw\x1b[31m\x7f\u0085\u2066"
	writeRawBan(t, iface, raw)

	out, errOut, code := runCLI("bans", iface)
	if code != 0 || errOut != "" {
		t.Fatalf("bans: exit %d: %s", code, errOut)
	}
	terminalSafe(t, "bans", out)
	for _, want := range []string{stored, `raw\x1b[31m\x7f\u0085\u2066`} {
		if !strings.Contains(out, want) {
			t.Errorf("bans lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "0.0.0.0/0") {
		t.Errorf("a ban of the world came through:\n%s", out)
	}

	got := checkBansJSON(t, iface, stored, raw)
	checkStatusEscaped(t, iface, len(got))
	terminalSafe(t, "the agent's log", logs.String())
}

// hsetHostileBans writes bans with hostile prefixes and reasons into the
// fleet's Redis at addr, as another member might.
func hsetHostileBans(t *testing.T, v *testutil.Veth, addr, namespace string) {
	host, port, _ := strings.Cut(addr, ":")
	end := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
	for _, e := range [][2]string{
		{"0.0.0.0/0", end + "|evil|the world"},
		{"::ffff:0.0.0.0/96", end + "|evil|the world"},
		{"198.51.100.66/32", end + "|evil\u202ehost|\x1b]0;pwned\x07\x1b[2J\u009b31m"},
		{"\x1b[2J", end + "|evil|"},
	} {
		out, err := command.Run(10*time.Second, "nsenter", "--net="+v.PeerNS.Path(), "redis-cli", "-h", host, "-p", port,
			"HSET", "xdpl:"+namespace+":bans", e[0], e[1])
		if err != nil || strings.Contains(string(out), "ERR") {
			t.Fatalf("redis-cli HSET: %v: %s", err, out)
		}
	}
}

// waitForBans waits until `bans` lists prefix.
func waitForBans(t *testing.T, iface, prefix string) {
	var out string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		out, _, _ = runCLI("bans", iface)
		if strings.Contains(out, prefix) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the fleet's ban never arrived; bans:\n%s", out)
		}
	}
}

// writeRawBan writes a ban with reason raw straight into iface's pinned
// ban table, in its last slot.
func writeRawBan(t *testing.T, iface, raw string) {
	s, err := loader.Open(iface)
	if err != nil {
		t.Fatal(err)
	}
	b := gen.XdplimitXdplBan{ExpiresNs: 1 << 62, Family: 4, Prefixlen: 32, Origin: 0xffff, Addr: [16]byte{203, 0, 113, 77}}
	for i := range len(raw) {
		b.Reason[i] = int8(raw[i])
	}
	slot := s.Limiter.BansCapacity() - 1
	err = s.Limiter.Map(gen.XdplimitMapXdplBans).Update(slot, &b, ebpf.UpdateAny)
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
}

// checkBansJSON: bans --json carries the reasons as they were stored and
// each ban's origin, and -o json is the same JSON. It returns the bans.
func checkBansJSON(t *testing.T, iface, stored, raw string) []metrics.BanJSON {
	out, _, _ := runCLI("bans", iface, "--json")
	terminalSafe(t, "bans --json", out)
	var got []metrics.BanJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("bans --json: %v\n%s", err, out)
	}
	reasons, origins := map[string]string{}, map[string]string{}
	for _, b := range got {
		reasons[b.Prefix], origins[b.Prefix] = b.Reason, b.Origin
	}
	if reasons["198.51.100.66/32"] != stored || reasons["203.0.113.77/32"] != raw {
		t.Errorf("bans --json decodes to %q", reasons)
	}
	// The fleet's ban is named after its feed; the raw one, whose reason
	// no feed wrote, stays manual.
	if origins["198.51.100.66/32"] != "fleet" || origins["203.0.113.77/32"] != "manual" {
		t.Errorf("bans --json origins %q", origins)
	}

	// -o json is the documented form; --json its alias. seconds_left
	// moves between the two runs.
	o, _, _ := runCLI("bans", iface, "-o", "json")
	var got2 []metrics.BanJSON
	if err := json.Unmarshal([]byte(o), &got2); err != nil || len(got2) != len(got) {
		t.Fatalf("bans -o json: %v\n%s", err, o)
	}
	for i := range got2 {
		if got2[i].SecondsLeft = got[i].SecondsLeft; got2[i] != got[i] {
			t.Errorf("bans -o json and bans --json differ: %+v, %+v", got2[i], got[i])
		}
	}
	return got
}

// checkStatusEscaped: status -o json is valid JSON with the policy's path
// and bans in force, and status prints the path escaped.
func checkStatusEscaped(t *testing.T, iface string, bans int) {
	out, _, _ := runCLI("status", iface, "-o", "json")
	terminalSafe(t, "status -o json", out)
	var st struct {
		Interfaces []struct {
			Policy struct {
				Path string `json:"path"`
			} `json:"policy"`
			Bans struct {
				InForce int `json:"in_force"`
			} `json:"bans"`
		} `json:"interfaces"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || len(st.Interfaces) != 1 ||
		!strings.HasSuffix(st.Interfaces[0].Policy.Path, "p\x1b[2J\u202e.yaml") || st.Interfaces[0].Bans.InForce != bans {
		t.Errorf("status -o json decodes to %+v (%v):\n%s", st, err, out)
	}

	out, _, _ = runCLI("status", iface)
	terminalSafe(t, "status", out)
	if !strings.Contains(out, `p\x1b[2J\u202e.yaml`) {
		t.Errorf("status does not show the policy path escaped:\n%s", out)
	}
}
