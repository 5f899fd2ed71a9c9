// SPDX-License-Identifier: Apache-2.0

// Package vm is the end-to-end suite: real traffic from the live-frames
// generator through veth pairs in namespaces the tests create, with the real
// xdplimit binary attached on the receiving end, and the packets that reach
// the receiver's IP stack counted by the kernel's own SNMP counters. The
// same test binary runs on the host and inside the 6.1 and 6.12 LTS VMs (make test-vm).
package vm

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/pktgen"
)

// lab is a sender and a receiver namespace joined by a veth pair whose names
// are unique, because pins live under /sys/fs/bpf/xdplimit/<ifname> in the
// one bpffs all namespaces share.
type lab struct {
	*testutil.Veth
	gen *pktgen.Generator
}

func newLab(t *testing.T, queues int) *lab {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.RequireLiveFrames(t)
	id := testutil.UniqueID(t, "xs", "xr")
	v := testutil.NewVethPair(t, testutil.VethConfig{Name: "xs" + id, PeerName: "xr" + id, Queues: queues})
	g, err := pktgen.Open(pktgen.Config{Timeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return &lab{Veth: v, gen: g}
}

// flood sends count frames to the receiver from the given CPUs, and waits
// until the receiver's stack has taken in what xdplimit passed.
func (l *lab) flood(t *testing.T, frame []byte, src pktgen.Sources, count uint64, cpus ...int) pktgen.Result {
	t.Helper()
	rx := l.PeerNS.RxSeen(t, l.PeerName)
	res := l.send(t, frame, src, count, cpus...)
	l.PeerNS.WaitRx(t, l.PeerName, rx, res.Sent)
	l.settle(t)
	return res
}

// floodFor floods frame in calls of chunk frames until the flood has lasted
// at least d, then waits for the stack as flood does. A fixed count lasts
// as long as the machine makes it: 16M frames took ~4 s where the windows
// test was sized and 1.5 s on a CPU that sends three times faster, where
// one window's error was 6%. The gaps between calls (10-25 ms) are shorter
// than the tests' windows and bursts; Elapsed includes them.
func (l *lab) floodFor(t *testing.T, frame []byte, d time.Duration, chunk uint64) pktgen.Result {
	t.Helper()
	total := pktgen.Result{PerCPU: map[int]uint64{}}
	rx := l.PeerNS.RxSeen(t, l.PeerName)
	begin := time.Now()
	for time.Since(begin) < d {
		r := l.send(t, frame, pktgen.Sources{}, chunk)
		total.Sent += r.Sent
		total.Bad += r.Bad
		total.CPUTime += r.CPUTime
		for cpu, n := range r.PerCPU {
			total.PerCPU[cpu] += n
		}
	}
	total.Elapsed = time.Since(begin)
	l.PeerNS.WaitRx(t, l.PeerName, rx, total.Sent)
	l.settle(t)
	return total
}

// send is flood without waiting for the stack: for floods that overlap
// another one, whose traffic keeps the stack busy.
func (l *lab) send(t *testing.T, frame []byte, src pktgen.Sources, count uint64, cpus ...int) pktgen.Result {
	t.Helper()
	if err := l.gen.SetSources(src); err != nil {
		t.Fatal(err)
	}
	res, err := l.gen.Send(context.Background(), l.NS.Path(), l.Name, frame, count, cpus...)
	if err != nil {
		t.Fatalf("flood: %v", err)
	}
	return res
}

// settle waits until the receiver's stack has taken in what was passed: a
// frame XDP passes reaches the IP layer asynchronously (the veth's NAPI may
// be deferred to ksoftirqd), so counters read the moment the generator
// returns can miss frames still in flight. Settled means the stack's count
// did not move for 50 ms.
func (l *lab) settle(t *testing.T) {
	t.Helper()
	last := l.PeerNS.Snapshot(t).IPReceives()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		cur := l.PeerNS.Snapshot(t).IPReceives()
		if cur == last {
			return
		}
		last = cur
	}
	t.Fatalf("the receiver's stack is still taking in packets 5 s after the flood")
}

func (l *lab) udpFrame(payload int) []byte {
	f := pktgen.Frame{SrcMAC: l.MAC, DstMAC: l.PeerMAC, Src: l.Addr, Dst: l.PeerAddr, SrcPort: 40000, DstPort: 9, Payload: payload}
	return f.MustBuild()
}

// proc is an xdplimit process running in the receiver's namespace.
type proc struct {
	cmd  *exec.Cmd
	out  *testutil.SyncBuffer
	done chan error
}

// start runs xdplimit with args in the receiver namespace. A child forked
// from a thread inside a namespace is born in it; unlike `ip netns exec` it
// keeps the host's mount namespace, so its pins persist.
func (l *lab) start(t *testing.T, args ...string) *proc {
	t.Helper()
	p := &proc{out: &testutil.SyncBuffer{}, done: make(chan error, 1)}
	p.cmd = exec.Command(testutil.XdplimitBin(t), args...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := l.PeerNS.Do(p.cmd.Start); err != nil {
		t.Fatalf("starting xdplimit %v: %v", args, err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("xdplimit %v output:\n%s", args, p.out)
		}
		// Whatever the test did, leave no program and no pins behind.
		removePins(l.PeerName)
	})
	return p
}

// removePins also removes the interface's run-time files (its lock, control
// socket and autopilot state), which only a process that exits normally
// removes itself (tests kill theirs).
func removePins(ifname string) {
	_ = os.RemoveAll("/sys/fs/bpf/xdplimit/" + ifname)
	for _, f := range []string{".lock", ".ctl", ".autopilot.json"} {
		_ = os.Remove("/run/xdplimit/" + ifname + f)
	}
}

// run runs xdplimit to completion in the receiver namespace.
func (l *lab) run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out []byte
	var err error
	derr := l.PeerNS.Do(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), testutil.MachineWait)
		defer cancel()
		out, err = exec.CommandContext(ctx, testutil.XdplimitBin(t), args...).CombinedOutput()
		return nil
	})
	if derr != nil {
		t.Fatal(derr)
	}
	return string(out), err
}

// attach starts `xdplimit attach` with the policy and waits until it is
// attached (its pins exist).
func (l *lab) attach(t *testing.T, policy string, extra ...string) *proc {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	// SIGTERM then detaches, as the tests that end with requireClean
	// expect; TestExitKeepsThenDetach starts its attach without it.
	p := l.start(t, append([]string{"attach", l.PeerName, "--policy", path, "--detach-on-exit"}, extra...)...)
	p.waitAttached(t)
	return p
}

// waitFor waits until the process has logged s, failing if it exits first.
func (p *proc) waitFor(t *testing.T, s string, timeout time.Duration) {
	t.Helper()
	testutil.WaitLogged(t, "xdplimit", p.out, func() (bool, error) {
		select {
		case err := <-p.done:
			p.done <- err
			return true, err
		default:
			return false, nil
		}
	}, s, timeout)
}

// waitAttached waits for the attach's "attached" log line. It matches the
// line's msg=attached field: other lines say "attached" too (the
// --keep-on-exit deprecation warning, "stays attached", comes before it).
// The attach verifies the program first: how long that takes is the
// machine's (testutil.MachineWait).
func (p *proc) waitAttached(t *testing.T) {
	t.Helper()
	p.waitFor(t, "msg=attached ", testutil.MachineWait)
}

// stop sends sig and waits for the process to exit.
func (p *proc) stop(t *testing.T, sig syscall.Signal) error {
	t.Helper()
	_ = p.cmd.Process.Signal(sig)
	select {
	case err := <-p.done:
		return err
	case <-time.After(testutil.MachineWait):
		t.Fatalf("xdplimit did not exit after %v:\n%s", sig, p.out)
	}
	return nil
}

// xdpAttached reports the XDP program on the receiver end, from netlink.
func (l *lab) xdpAttached(t *testing.T) *netlink.LinkXdp {
	t.Helper()
	var x *netlink.LinkXdp
	err := l.PeerNS.Do(func() error {
		nl, err := netlink.LinkByName(l.PeerName)
		if err != nil {
			return err
		}
		x = nl.Attrs().Xdp
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if x == nil || !x.Attached {
		return nil
	}
	return x
}

// ringDrops is the receiver's rx_dropped: veth counts there every frame
// it drops before the receiver's XDP program sees it, because the XDP ring
// (native mode) or the backlog (generic mode) was full. The sender's
// tx_dropped counts the same frames again.
func (l *lab) ringDrops(t *testing.T) uint64 {
	t.Helper()
	return l.PeerNS.RxDropped(t, l.PeerName)
}

// requireClean checks that nothing of xdplimit is left on the receiver end.
func (l *lab) requireClean(t *testing.T) {
	t.Helper()
	if x := l.xdpAttached(t); x != nil {
		t.Errorf("an XDP program (id %d) is still attached to %s", x.ProgId, l.PeerName)
	}
	if _, err := os.Stat("/sys/fs/bpf/xdplimit/" + l.PeerName); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pins remain in /sys/fs/bpf/xdplimit/%s (%v)", l.PeerName, err)
	}
}

// statusJSON runs `xdplimit status -o json` on the receiving end.
func (l *lab) statusJSON(t *testing.T) testutil.Status {
	t.Helper()
	out, err := l.run(t, "status", l.PeerName, "-o", "json")
	var st testutil.Status
	if err == nil {
		err = json.Unmarshal([]byte(out), &st)
	}
	if err != nil || len(st.Interfaces) != 1 {
		t.Fatalf("status -o json: %v\n%s", err, out)
	}
	return st
}

// ruleCounts reads one rule's counters from `xdplimit status -o json`.
func (l *lab) ruleCounts(t *testing.T, rule string) (pass, drop, shadow uint64) {
	t.Helper()
	pass, drop, shadow, ok := l.ruleCountsIf(t, rule)
	if !ok {
		t.Fatalf("rule %s not in status", rule)
	}
	return pass, drop, shadow
}

// ruleCountsIf is ruleCounts of a rule that may have gone (the autopilot's).
func (l *lab) ruleCountsIf(t *testing.T, rule string) (pass, drop, shadow uint64, ok bool) {
	t.Helper()
	for _, r := range l.statusJSON(t).Interfaces[0].Rules {
		if r.Rule == rule {
			return r.Verdicts["pass"].Packets, r.Verdicts["drop"].Packets, r.Verdicts["shadow_drop"].Packets, true
		}
	}
	return 0, 0, 0, false
}

func within(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	r := got / want
	t.Logf("%s: %.0f, expected %.0f (ratio %.4f)", what, got, want, r)
	if r < 1-tol || r > 1+tol {
		t.Errorf("%s: %.0f is not within %.0f%% of %.0f", what, got, tol*100, want)
	}
}

// sendUDP sends n datagrams from the sender's own stack to the receiver's
// port 9 (discard) and returns how many the socket took. It paces itself
// in groups of 50 a millisecond apart so the receiver's backlog (1000
// frames by default) never overflows and every frame meets the program.
func (l *lab) sendUDP(t *testing.T, n int) uint64 {
	t.Helper()
	var sent uint64
	err := l.NS.Do(func() error {
		// Unconnected: the receiver's port unreachable replies set no
		// error that a later write would return instead of sending.
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: l.Addr.AsSlice()})
		if err != nil {
			return err
		}
		defer c.Close()
		to := &net.UDPAddr{IP: l.PeerAddr.AsSlice(), Port: 9}
		payload := make([]byte, 18)
		for i := range n {
			if _, err := c.WriteToUDP(payload, to); err != nil {
				return err
			}
			sent++
			if i%50 == 49 {
				time.Sleep(time.Millisecond)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("sending UDP: %v", err)
	}
	return sent
}

func writePolicy(t *testing.T, s string) string {
	t.Helper()
	path := t.TempDir() + "/policy.yaml"
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// spoofer opens a generator of its own, beside the lab's, that sends a UDP
// datagram to port 9 from random sources in 10.0.0.0/8 (forgedSources): a
// spoofed flood that can run while the lab's generator sends the traffic a
// test judges. It closes when the test ends.
func (l *lab) spoofer(t *testing.T) (*pktgen.Generator, []byte) {
	t.Helper()
	spoof, err := pktgen.Open(pktgen.Config{Timeout: 2 * time.Minute, Sources: forgedSources})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { spoof.Close() })
	frame := pktgen.Frame{SrcMAC: l.MAC, DstMAC: l.PeerMAC, Src: forgedSources.First, Dst: l.PeerAddr,
		SrcPort: 40000, DstPort: 9, Payload: 18}.MustBuild()
	return spoof, frame
}
