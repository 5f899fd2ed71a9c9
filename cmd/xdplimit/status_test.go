package main

import (
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/agent"
	"github.com/xdplimit/xdplimit/internal/testutil"
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
	deadline := time.Now().Add(10 * time.Second)
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
