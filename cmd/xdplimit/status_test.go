// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/agent"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/metrics"
)

func TestStatusRefuses(t *testing.T) {
	cases := []cliCase{
		refused("two interfaces", "accepts at most 1 arg(s), received 2", "status", noIface, "eth9"),
		refused("not attached", notAttached(t), "status", noIface),
		refused("flag value", `invalid argument "maybe" for "--count-sources" flag: strconv.ParseBool: parsing "maybe": invalid syntax`,
			"status", noIface, "--count-sources=maybe"),
	}
	runCases(t, append(cases, badNameCases("status")...))
}

// TestStatusOfAgent: status reports an agent running in this process (its
// pins, and the fleet status file its sync writes) as it would the attach
// process that runs one.
func TestStatusOfAgent(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireRedis(t)
	v := testutil.NewUniqueVethPair(t, "xsts", "xstr")
	iface := v.PeerName
	r := testutil.StartRedis(t, v.PeerNS, testutil.RedisConfig{Addr: netip.MustParseAddrPort("127.0.0.1:6379")})
	policy := writeFile(t, "p.yaml", "fleet:\n  redis: [redis://"+r.Addr()+"/0]\n  namespace: status-test\n  sync: 50ms\n"+
		"rules:\n  - name: dns\n    limit: {algorithm: token_bucket, rate: 1000/s, burst: 1000, scope: fleet}\n")
	var logs testutil.SyncBuffer
	startAgent(t, v, agent.Config{Policy: policy, FleetDialer: testutil.DialIn(v.PeerNS),
		Log: slog.New(slog.NewTextHandler(&logs, nil))})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent log:\n%s", logs.String())
		}
	})

	want := []*regexp.Regexp{
		regexp.MustCompile(fmt.Sprintf(`(?m)^%s: attached \(native\), program id \d+, since \S+, attach process pid %d$`, iface, os.Getpid())),
		regexp.MustCompile(`(?m)^  policy: ` + regexp.QuoteMeta(policy) + ` \(sha256 [0-9a-f]{16}\)$`),
		regexp.MustCompile(`(?m)^  fleet: 1 levels, Redis \[redis://` + regexp.QuoteMeta(r.Addr()) + `/0\] namespace status-test up since \S+, sync 50ms$`),
	}
	var out, errOut string
	var code int
	deadline := time.Now().Add(testutil.MachineWait)
	for {
		out, errOut, code = runCLI("status", iface)
		ok := code == 0 && errOut == ""
		for _, re := range want {
			ok = ok && re.MatchString(out)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("status %s: exit %d, stderr %q, stdout:\n%s\nwant lines matching %q", iface, code, errOut, out, want)
}

// TestStatusSource: status --source, as text and as JSON, and status -o
// json, on an attached limiter after real traffic.
func TestStatusSource(t *testing.T) {
	testutil.RequireRoot(t)
	v := testutil.NewUniqueVethPair(t, "xsso", "xssr")
	iface := v.PeerName
	policy := writeFile(t, "p.yaml", `rules:
  - name: dns
    match: {protocol: udp, dst_ports: [53]}
    limit: {algorithm: token_bucket, rate: 1/m, burst: 3}
    action: reject
`)
	startAgent(t, v, agent.Config{Policy: policy})
	err := v.NS.Do(func() error {
		// Not connected: the stack's port unreachable for the admitted
		// ones (nothing listens) must not fail the writes.
		c, err := net.ListenPacket("udp4", netip.AddrPortFrom(v.Addr, 0).String())
		if err != nil {
			return err
		}
		defer c.Close()
		to := net.UDPAddrFromAddrPort(netip.AddrPortFrom(v.PeerAddr, 53))
		for i := 0; i < 5; i++ {
			if _, err := c.WriteTo(make([]byte, 64), to); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The datagrams reach the program on the receiving end's NAPI: wait
	// for the fifth.
	var st testutil.Status
	for deadline := time.Now().Add(testutil.MachineWait); ; time.Sleep(20 * time.Millisecond) {
		out, errOut, code := runCLI("status", iface, "-o", "json")
		if code != 0 {
			t.Fatalf("status -o json: exit %d: %s", code, errOut)
		}
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("status -o json: %v\n%s", err, out)
		}
		r := st.Interfaces[0].Rules[0]
		if r.Verdicts["pass"].Packets+r.Verdicts["drop"].Packets+r.Verdicts["reject"].Packets == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the program did not judge 5 datagrams:\n%s", out)
		}
	}
	r := st.Interfaces[0].Rules[0]
	// Three admitted; the two refused answered or dropped unanswered
	// (one answer a second to a source: the second is, unless a second
	// passed between them).
	if st.Interfaces[0].Interface != iface || r.Rule != "dns" || r.Verdicts["pass"].Packets != 3 || r.Reject == nil ||
		r.Reject.Sent+r.Reject.Suppressed != 2 || r.Reject.Sent != r.Verdicts["reject"].Packets || r.Reject.Sent == 0 ||
		st.Interfaces[0].Counters["reject_source"].Packets != r.Reject.Suppressed {
		t.Errorf("status -o json: %+v", st)
	}

	out, errOut, code := runCLI("status", iface, "--source", v.Addr.String())
	want := "      level 0, key src_ip " + v.Addr.String() + "/32, token_bucket: 0 of 3 packets left, admitted again in "
	if code != 0 || !strings.Contains(out, iface+": source "+v.Addr.String()+"\n") ||
		!strings.Contains(out, "    dns (action reject)\n") || !strings.Contains(out, want) {
		t.Errorf("status --source: exit %d, stderr %q, stdout:\n%s\nwant %q", code, errOut, out, want)
	}
	out, _, _ = runCLI("status", iface, "--source", v.Addr.String(), "-o", "json")
	var src metrics.Sources
	if err := json.Unmarshal([]byte(out), &src); err != nil || src.Address != v.Addr.String() || len(src.Interfaces) != 1 ||
		len(src.Interfaces[0].Rules) != 1 || *src.Interfaces[0].Rules[0].Levels[0].Remaining != 0 ||
		src.Interfaces[0].Rules[0].Levels[0].Limit != 3 || *src.Interfaces[0].Rules[0].Levels[0].RetryAfter <= 0 {
		t.Errorf("status --source -o json (%v):\n%s", err, out)
	}

	runCases(t, []cliCase{
		refused("source", `--source "nope": not an IP address`, "status", iface, "--source", "nope"),
		refused("port alone", "--port goes with --source", "status", iface, "--port", "53"),
		refused("output", `--output "xml": give text or json`, "status", iface, "-o", "xml"),
	})
}
