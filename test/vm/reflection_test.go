package vm

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/loader"
	"github.com/xdplimit/xdplimit/maps"
)

// The reflection guard end to end: the listener's namespace resolves names
// through a real DNS server (dnsmasq) in the client's namespace, with a
// real load generator (dnsperf), while forged DNS answers (source port 53,
// random reflector addresses, 1000 bytes) flood it from the router's side.

const dnsLookups = 10000

// startDNS runs dnsmasq in ns on addr:53, answering example.test, until the
// test ends.
func startDNS(t *testing.T, ns *testutil.Netns, addr string) {
	t.Helper()
	bin, err := exec.LookPath("dnsmasq")
	testutil.Require(t, err == nil, "dnsmasq not found (Debian package dnsmasq-base; run make deps)")
	startDaemon(t, ns, "dnsmasq", exec.Command(bin, "--no-daemon", "--no-resolv", "--no-hosts", "--bind-interfaces", "--listen-address="+addr,
		"--port=53", "--address=/example.test/192.0.2.1", "--user=root", "--pid-file=", "--cache-size=1000"))
}

// startDaemon starts a server (name, for the log) that runs in the
// foreground in ns until the test ends, when its whole process group is
// killed, also when the test fails; its output, returned, is printed then.
// A process group of its own: dnsmasq forks helpers, and a dnsmasq
// outlived a test whose cleanup killed only the first.
func startDaemon(t *testing.T, ns *testutil.Netns, name string, cmd *exec.Cmd) *testutil.SyncBuffer {
	t.Helper()
	out := &testutil.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := ns.Do(cmd.Start); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		if t.Failed() {
			t.Logf("%s output:\n%s", name, out)
		}
	})
	return out
}

// dnsperfResult is what dnsperf counted of its queries.
type dnsperfResult struct{ sent, completed int }

var dnsperfLine = regexp.MustCompile(`Queries (sent|completed):\s+(\d+)`)

// lookups runs dnsperf in ns: n queries for example.test to server, at
// most 2000 a second, each given timeout. dnsperf keeps at most 100
// queries outstanding, so where most are lost a run lasts about
// n/100 timeouts.
func lookups(t *testing.T, ns *testutil.Netns, server string, n int, timeout time.Duration) dnsperfResult {
	t.Helper()
	bin, err := exec.LookPath("dnsperf")
	testutil.Require(t, err == nil, "dnsperf not found (Debian package dnsperf; run make deps)")
	qf := filepath.Join(t.TempDir(), "queries")
	if err := os.WriteFile(qf, []byte("example.test A\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out []byte
	var runErr error
	if err := ns.Do(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		out, runErr = exec.CommandContext(ctx, bin, "-s", server, "-d", qf, "-n", strconv.Itoa(n), "-c", "4",
			"-Q", "2000", "-t", strconv.Itoa(int(timeout/time.Second))).CombinedOutput()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if runErr != nil {
		t.Fatalf("dnsperf: %v\n%s", runErr, out)
	}
	var r dnsperfResult
	for _, m := range dnsperfLine.FindAllStringSubmatch(string(out), -1) {
		v, _ := strconv.Atoi(m[2])
		if m[1] == "sent" {
			r.sent = v
		} else {
			r.completed = v
		}
	}
	if r.sent == 0 {
		t.Fatalf("dnsperf sent nothing:\n%s", out)
	}
	return r
}

// TestReflectionDNS: under a flood of forged DNS answers, the guard drops
// the flood and the host's own lookups succeed; the signature rule of
// examples/dns-amplification.yaml, side by side, is reported.
func TestReflectionDNS(t *testing.T) {
	cl := newCookieLab(t)
	resolver := clientNet.Addr().String()
	startDNS(t, cl.C, resolver)
	cl.attachPolicy(t, "conversations: {reflection: always}\nrules: []\n")
	// Without a flood, every answer is one the guard must pass: it drops
	// none. (Under emulation dnsperf and dnsmasq share the CPUs with
	// another test binary, and a few lookups may outlast their timeout.)
	c00 := cl.conversationCounters(t)
	r0 := lookups(t, cl.PeerNS, resolver, 1000, 2*time.Second)
	if n := cl.conversationCounters(t)[maps.CounterNoRequest] - c00[maps.CounterNoRequest]; n != 0 || r0.completed*10 < r0.sent*9 {
		t.Fatalf("before the flood, %d of %d lookups completed and the guard dropped %d answers", r0.completed, r0.sent, n)
	}
	c0, rx0, before := cl.conversationCounters(t), cl.PeerNS.RxSeen(t, cl.PeerName), cl.stack(t)
	ring0, server0 := cl.PeerNS.RxDropped(t, cl.PeerName), cl.C.Snapshot(t).Raw
	flood := cl.startFlood(t, cl.forgedUDP(53, 40000, 1000), forgedSources, floodBound)
	waitFor(t, "the flood to reach the listener", 30*time.Second, func() bool {
		return cl.conversationCounters(t)[maps.CounterNoRequest] > c0[maps.CounterNoRequest]+1000
	})
	r := lookups(t, cl.PeerNS, resolver, dnsLookups, 2*time.Second)
	_, running := flood.stop(t)
	cl.PeerNS.Settle(t)
	c, st := cl.conversationCounters(t), cl.stack(t).minus(before)
	ring := cl.PeerNS.RxDropped(t, cl.PeerName) - ring0
	seen := cl.PeerNS.RxSeen(t, cl.PeerName) - rx0 - ring
	noReq := c[maps.CounterNoRequest] - c0[maps.CounterNoRequest]
	// Where the lost lookups were lost: the router, busy sending the
	// flood, loses some queries on their way to the server (the server's
	// own counters say how many it answered); the listener's veth ring
	// turns frames away before any program sees them when the flood fills
	// it, answers among them. Only what is left is the guard's.
	server := cl.C.Snapshot(t).Raw
	answered := server["Udp.OutDatagrams"] - server0["Udp.OutDatagrams"]
	ringShare := float64(ring) / float64(ring+seen)
	arrived := st.ipIn
	t.Logf("guard: %d of %d lookups completed under the flood (%.3f%%; target 99.9%%): the server answered %d "+
		"(the rest were lost on the way to it), %d answers reached the listener's stack; the veth ring turned "+
		"away %.3f%% of all frames before XDP; %d frames met the program, %d dropped as no_request; %s",
		r.completed, r.sent, 100*float64(r.completed)/float64(r.sent), answered, arrived, 100*ringShare, seen, noReq, st)
	if !running {
		t.Errorf("the flood ended before the lookups did")
	}
	if answered*10 < uint64(r.sent)*9 {
		t.Errorf("the server answered %d of %d queries: the lab lost too many to judge the guard", answered, r.sent)
	}
	lostAnswers := answered - min(answered, arrived)
	if limit := 2*ringShare*float64(answered) + float64(answered)/1000; float64(lostAnswers) > limit {
		t.Errorf("%d of %d answers did not reach the listener's stack, more than the ring's share explains (%.0f): "+
			"the guard dropped answers", lostAnswers, answered, limit)
	}
	// What met the program is the lookups' answers, which dnsperf
	// counted, and the flood: a forged answer the guard let through would
	// reach the stack and be missing from the drops, whatever the stack
	// did with it.
	forged := seen - min(seen, uint64(r.completed))
	if noReq*10000 < forged*9999 {
		t.Errorf("%d of %d forged answers dropped, want 99.99%%", noReq, forged)
	}

	if !cl.egressAttached(t) {
		t.Errorf("no request recorder on the egress of %s while the guard is on", cl.PeerName)
	}
	// Side by side: the signature rule of examples/dns-amplification.yaml
	// (its allow list is an example address, left out).
	cl.reload(t, signatureOnly)
	if cl.egressAttached(t) {
		t.Errorf("the request recorder stayed on the egress after a reload without the guard")
	}
	flood = cl.startFlood(t, cl.forgedUDP(53, 40000, 1000), forgedSources, floodBound)
	time.Sleep(time.Second)
	// A thousand: half of them wait out their timeout.
	sig := lookups(t, cl.PeerNS, resolver, 1000, time.Second)
	flood.stop(t)
	t.Logf("signature rule: %d of %d lookups completed under the same flood (%.1f%%)", sig.completed, sig.sent,
		100*float64(sig.completed)/float64(sig.sent))
}

const signatureOnly = `
rules:
  - name: dns-responses
    match: {protocol: udp, src_ports: [53]}
    limit: {algorithm: token_bucket, rate: 200/s, burst: 400}
    aggregate:
      - key: global
        limit: {algorithm: token_bucket, rate: 100Mbit/s, burst: 1MB}
`

// egressAttached says whether xdplimit's request recorder is on the
// listener's egress.
func (cl *cookieLab) egressAttached(t *testing.T) bool {
	t.Helper()
	var on bool
	if err := cl.PeerNS.Do(func() error {
		var err error
		on, err = loader.EgressAttached(cl.PeerIndex)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return on
}
