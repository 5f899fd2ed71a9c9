// SPDX-License-Identifier: Apache-2.0

package container

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/pktgen"
)

// lab is a veth pair between two namespaces the test made: the generator
// sends from one end, and the container's agent attaches to the other, in
// whose namespace it runs as on a node's.
type lab struct {
	*testutil.Veth
	gen  *pktgen.Generator
	node node
}

func newLab(t *testing.T) *lab {
	t.Helper()
	testutil.RequireLiveFrames(t)
	id := testutil.UniqueID(t, "cs", "cr")
	v := testutil.NewVethPair(t, testutil.VethConfig{Name: "cs" + id, PeerName: "cr" + id})
	// Runs before the namespaces go (cleanups run last first): whatever
	// the test did, no pin of this interface stays.
	t.Cleanup(func() { _ = os.RemoveAll("/sys/fs/bpf/xdplimit/" + v.PeerName) })
	g, err := pktgen.Open(pktgen.Config{Timeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return &lab{Veth: v, gen: g, node: node{
		netnsPath: v.PeerNS.Path(), iface: v.PeerName, hostIP: v.PeerAddr.String(),
		policyDir: t.TempDir(), runDir: t.TempDir(),
	}}
}

// flood sends count frames of one UDP flow to the agent's interface and
// waits until the receiving end has taken them in and its stack is quiet.
func (l *lab) flood(t *testing.T, count uint64) pktgen.Result {
	t.Helper()
	frame := pktgen.Frame{SrcMAC: l.MAC, DstMAC: l.PeerMAC, Src: l.Addr, Dst: l.PeerAddr,
		SrcPort: 40000, DstPort: 9, Payload: 18}.MustBuild()
	rx := l.PeerNS.RxSeen(t, l.PeerName)
	res, err := l.gen.Send(context.Background(), l.NS.Path(), l.Name, frame, count)
	if err != nil {
		t.Fatalf("flood: %v", err)
	}
	l.PeerNS.WaitRx(t, l.PeerName, rx, res.Sent)
	l.PeerNS.Settle(t)
	return res
}

// counts reads the rules' counters from the pins with the host's
// xdplimit, as `xdplimit status` on a node does: rule → pass, drop.
func (l *lab) counts(t *testing.T) map[string][2]uint64 {
	t.Helper()
	var out []byte
	err := l.PeerNS.Do(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var err error
		out, err = exec.CommandContext(ctx, testutil.XdplimitBin(t), "status", l.PeerName, "-o", "json").Output()
		return err
	})
	var st testutil.Status
	if err == nil {
		err = json.Unmarshal(out, &st)
	}
	if err != nil || len(st.Interfaces) != 1 {
		t.Fatalf("xdplimit status -o json: %v\n%s", err, out)
	}
	c := map[string][2]uint64{}
	for _, r := range st.Interfaces[0].Rules {
		c[r.Rule] = [2]uint64{r.Verdicts["pass"].Packets, r.Verdicts["drop"].Packets}
	}
	return c
}

// enforce floods and checks that rule r held the flow to its limit (1000/s,
// burst 100) over the flood's measured duration, and that what it passed
// is what reached the stack.
func (l *lab) enforce(t *testing.T, what string) {
	t.Helper()
	before, stack0 := l.counts(t)["r"], l.PeerNS.Snapshot(t)
	res := l.flood(t, 200_000)
	after := l.counts(t)["r"]
	stack := l.PeerNS.Snapshot(t).Delta(stack0).IPReceives()
	pass, drop := after[0]-before[0], after[1]-before[1]
	limit := 100 + 1000*res.Elapsed.Seconds()*1.1 + 100
	t.Logf("%s: sent %d in %v: passed %d (at most %.0f), dropped %d, %d reached the stack",
		what, res.Sent, res.Elapsed, pass, limit, drop, stack)
	if drop == 0 || float64(pass) > limit {
		t.Errorf("%s: not enforcing: passed %d of %d (limit %.0f), dropped %d", what, pass, res.Sent, limit, drop)
	}
	// Each frame XDP passed goes up the stack; a few more may be the
	// namespace's own (IPv6 neighbour discovery).
	if stack < pass || stack > pass+20 {
		t.Errorf("%s: %d reached the stack, the rule passed %d", what, stack, pass)
	}
	// A veth ring full under the flood turns frames away before XDP; most
	// must have been judged.
	if float64(pass+drop) < 0.9*float64(res.Sent) {
		t.Errorf("%s: the rule judged %d of %d frames sent", what, pass+drop, res.Sent)
	}
}

// watchXDP samples the interface's XDP program every millisecond until
// stop is closed; it counts the samples, and those that found none.
func (l *lab) watchXDP(t *testing.T, stop <-chan struct{}) (samples, gaps *atomic.Int64) {
	t.Helper()
	samples, gaps = &atomic.Int64{}, &atomic.Int64{}
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			_ = l.PeerNS.Do(func() error {
				link, err := netlink.LinkByName(l.PeerName)
				samples.Add(1)
				if err != nil || link.Attrs().Xdp == nil || !link.Attrs().Xdp.Attached {
					gaps.Add(1)
				}
				return nil
			})
		}
	}()
	return samples, gaps
}

// healthz asks the agent's /healthz on the node's address, from the node's
// namespace, as the kubelet's probe does.
func (l *lab) healthz(t *testing.T) (int, string) {
	t.Helper()
	// Dialled inside the namespace: net/http dials on a goroutine of its
	// own, which would be in the host's.
	tr := &http.Transport{DialContext: testutil.DialIn(l.PeerNS)}
	defer tr.CloseIdleConnections()
	c := &http.Client{Timeout: 5 * time.Second, Transport: tr}
	resp, err := c.Get(fmt.Sprintf("http://%s:9740/healthz", l.PeerAddr))
	if err != nil {
		t.Fatalf("GET /healthz: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

const policy1 = "rules:\n  - name: r\n    match: {protocol: udp, dst_ports: [9]}\n" +
	"    limit: {algorithm: token_bucket, rate: 1000/s, burst: 100}\n"

// The image, run as the DaemonSet runs it, attaches and enforces; killed
// with SIGKILL, it leaves the limiter enforcing; a second container adopts
// it without the program ever leaving the interface, counters kept; a
// ConfigMap update, made as the kubelet makes it, is reloaded, and a bad
// one refused with the previous policy kept, also by an agent started with
// it; the image's detach removes the limiter.
func TestContainerEnforcesAndIsAdopted(t *testing.T) {
	start := time.Now()
	l := newLab(t)
	p := newPodman(t)
	cfg := load(t, p)
	spec, c := agentSpec(t)
	configMap(t, l.node.policyDir, map[string]string{"policy.yaml": policy1})

	p.must(t, time.Minute, runArgs(t, spec, c, l.node, "agent1", cfg.Ref())...)
	p.waitLog(t, "agent1", testutil.MachineWait, `"msg":"attached"`, `"adopted":false`)
	if code, body := l.healthz(t); code != http.StatusOK || body != "ok\n"+l.PeerName+": ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	prog := l.PeerNS.XDPProgID(t, l.PeerName)
	if prog == 0 {
		t.Fatal("no XDP program on the interface after attached")
	}
	l.enforce(t, "agent running")

	stop := make(chan struct{})
	samples, gaps := l.watchXDP(t, stop)
	p.must(t, time.Minute, "kill", "--signal", "KILL", "agent1")
	p.must(t, time.Minute, "wait", "agent1")
	if id := l.PeerNS.XDPProgID(t, l.PeerName); id != prog {
		t.Fatalf("after SIGKILL the interface's program is %d, was %d", id, prog)
	}
	l.enforce(t, "agent killed")
	kept := l.counts(t)["r"]

	p.must(t, time.Minute, runArgs(t, spec, c, l.node, "agent2", cfg.Ref())...)
	p.waitLog(t, "agent2", testutil.MachineWait, `"msg":"attached"`, `"adopted":true`)
	close(stop)
	t.Logf("the interface's XDP program, sampled %d times from the kill to the adoption: missing %d times",
		samples.Load(), gaps.Load())
	if n := gaps.Load(); n != 0 || samples.Load() < 100 {
		t.Errorf("the interface had no XDP program in %d of %d samples between the kill and the adoption",
			n, samples.Load())
	}
	if code, body := l.healthz(t); code != http.StatusOK {
		t.Errorf("/healthz of the adopting agent: %d %q", code, body)
	}
	if now := l.counts(t)["r"]; now[0] < kept[0] || now[1] < kept[1] {
		t.Errorf("adoption reset the counters: %v, were %v", now, kept)
	}
	l.enforce(t, "adopted")
	reloadThroughConfigMap(t, l, p, "agent2")

	// The pod's SIGTERM leaves the limiter. A pod started while the
	// ConfigMap holds a bad policy fails (CrashLoopBackOff), and the
	// limiter keeps enforcing the last good one.
	p.must(t, time.Minute, "stop", "--time", "30", "agent2")
	if l.PeerNS.XDPProgID(t, l.PeerName) == 0 {
		t.Fatal("SIGTERM detached the limiter")
	}
	p.must(t, time.Minute, runArgs(t, spec, c, l.node, "agent3", cfg.Ref())...)
	if out, _ := p.run(time.Minute, "wait", "agent3"); out == "0\n" {
		t.Errorf("an agent started with a bad policy exited 0:\n%s", p.logs(t, "agent3"))
	}
	if logs := p.logs(t, "agent3"); !strings.Contains(logs, "policy.yaml:") {
		t.Errorf("the failed start does not name the policy's error:\n%s", logs)
	}
	l.enforce(t, "after a start refused its policy")
	detach := runArgs(t, spec, c, l.node, "detach", cfg.Ref())
	detach = append(detach[:len(detach)-len(c.Args)], "detach", l.PeerName)
	p.must(t, time.Minute, detach...)
	if out, err := p.run(time.Minute, "wait", "detach"); err != nil || out != "0\n" {
		t.Fatalf("detach: %v %q\n%s", err, out, p.logs(t, "detach"))
	}
	if id := l.PeerNS.XDPProgID(t, l.PeerName); id != 0 {
		t.Errorf("program %d still attached after detach", id)
	}
	if _, err := os.Stat("/sys/fs/bpf/xdplimit/" + l.PeerName); !os.IsNotExist(err) {
		t.Errorf("pins left after detach: %v", err)
	}
	t.Logf("the container test took %v", time.Since(start).Round(time.Millisecond))
}

// reloadThroughConfigMap updates the policy as the kubelet does: a new
// rule appears once the agent has reloaded; then a policy the agent
// refuses is logged and the previous one stays.
func reloadThroughConfigMap(t *testing.T, l *lab, p *podman, name string) {
	t.Helper()
	configMap(t, l.node.policyDir, map[string]string{"policy.yaml": policy1 +
		"  - name: second\n    match: {protocol: tcp}\n    limit: {algorithm: token_bucket, rate: 10/s, burst: 10}\n"})
	p.waitLog(t, name, 30*time.Second, `"msg":"reloaded"`)
	if _, ok := l.counts(t)["second"]; !ok {
		t.Fatal("reloaded, but the new rule is not in force")
	}
	configMap(t, l.node.policyDir, map[string]string{"policy.yaml": "rules:\n  - name: Bad Name\n"})
	p.waitLog(t, name, 30*time.Second, `reload failed; the previous policy stays in force`)
	if _, ok := l.counts(t)["second"]; !ok {
		t.Error("a refused policy replaced the one in force")
	}
	l.enforce(t, "after a refused reload")
}
