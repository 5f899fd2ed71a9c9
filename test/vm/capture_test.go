// SPDX-License-Identifier: Apache-2.0

package vm

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
)

// A capture is tcpdump writing what crosses one interface of a test's
// namespace to a file, so that a failure can show the packets of the one
// connection that failed, from each end, beside the sockets' own view
// (connlog_test.go): which segment was lost, and where, or refused, and
// why, is then read rather than guessed. The filter keeps it to the
// client's own traffic, a few thousand frames, not a flood's millions.
type capture struct {
	name, path string
	cmd        *exec.Cmd
	out        *testutil.SyncBuffer
	done       chan struct{}
	err        error
}

// startCapture starts tcpdump on iface in ns with the filter given and
// returns once it listens. The test's cleanup stops it, also on failure.
func startCapture(t *testing.T, ns *testutil.Netns, name, iface, filter string) *capture {
	t.Helper()
	bin, err := exec.LookPath("tcpdump")
	testutil.Require(t, err == nil, "tcpdump not found (Debian package tcpdump; run make deps)")
	c := &capture{name: name, path: filepath.Join(t.TempDir(), name+".pcap"), out: &testutil.SyncBuffer{},
		done: make(chan struct{})}
	// Immediate mode and -U: each packet is written as it comes, so that
	// what was captured is in the file whenever the capture is stopped.
	c.cmd = exec.Command(bin, "-i", iface, "-n", "--immediate-mode", "-U", "-Z", "root", "-s", "128", "-w", c.path, filter)
	c.cmd.Stdout, c.cmd.Stderr = c.out, c.out
	// No Pdeathsig: ns.Do's thread ends when it returns. The cleanup kills it.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := ns.Do(c.cmd.Start); err != nil {
		t.Fatalf("starting tcpdump (%s): %v", name, err)
	}
	go func() { c.err = c.cmd.Wait(); close(c.done) }()
	t.Cleanup(c.stop)
	ended := func() (bool, error) {
		select {
		case <-c.done:
			return true, c.err
		default:
			return false, nil
		}
	}
	testutil.WaitLogged(t, "tcpdump ("+name+")", c.out, ended, "listening on "+iface, testutil.MachineWait)
	return c
}

// stop ends the capture: SIGINT, on which tcpdump flushes and exits, and
// SIGKILL if it has not within 10 s. Stopping twice is harmless.
func (c *capture) stop() {
	select {
	case <-c.done:
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		<-c.done
	}
}

// show stops the capture and returns its packets that filter selects,
// decoded (absolute sequence numbers, TCP options, epoch timestamps), or
// what went wrong reading them.
func (c *capture) show(filter string) string {
	select {
	case <-c.done:
	default:
		// A packet the stack counted can still be on its way to
		// tcpdump's socket, and SIGINT ends tcpdump without reading
		// what it holds: once, before the capture stops.
		time.Sleep(500 * time.Millisecond)
		c.stop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, c.cmd.Path, "-r", c.path, "-Z", "root", "-n", "-S", "-tt", "-v", filter).CombinedOutput()
	s := strings.TrimSpace(string(out))
	if err != nil {
		s += fmt.Sprintf("\n(tcpdump -r: %v)", err)
	}
	// tcpdump's own summary, written as it exits: a capture that lost
	// packets (its socket's buffer full while the flood starved it of
	// CPU) says so, and an absent packet is then no evidence.
	var summary []string
	for _, l := range strings.Split(c.out.String(), "\n") {
		if strings.Contains(l, "packets captured") || strings.Contains(l, "dropped by") {
			summary = append(summary, strings.TrimSpace(l))
		}
	}
	return fmt.Sprintf("what %s captured of %s (in all: %s):\n%s", c.name, filter, strings.Join(summary, ", "), s)
}

// changedCounters lists the SNMP counters that moved between two snapshots
// of a namespace, by name: a client's view of what its stack discarded
// (PAWS, checksums, out-of-window segments) during a run.
func changedCounters(before, after testutil.Counters) string {
	var names []string
	for k, v := range after.Raw {
		if v != before.Raw[k] {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	var b strings.Builder
	for _, k := range names {
		fmt.Fprintf(&b, " %s +%d", k, after.Raw[k]-before.Raw[k])
	}
	return b.String()
}

// The capture a failure shows holds the connection asked for and no other:
// two datagrams from two ports, one asked for.
func TestCaptureShowsOneConnection(t *testing.T) {
	v := testutil.NewVethPair(t, testutil.VethConfig{})
	c := startCapture(t, v.PeerNS, "the peer's end", v.PeerName, "udp")
	var ports []uint16
	rx := v.PeerNS.RxSeen(t, v.PeerName)
	for range 2 {
		conn, err := v.NS.DialContext(context.Background(), "udp", netip.AddrPortFrom(listenerAddr, 9).String())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Write([]byte("captured")); err != nil {
			t.Fatal(err)
		}
		ports = append(ports, conn.LocalAddr().(*net.UDPAddr).AddrPort().Port())
		conn.Close()
	}
	// tcpdump -U writes each packet as it comes; the peer has counted
	// both by the time the capture stops.
	if !v.PeerNS.WaitRx(t, v.PeerName, rx, 2) {
		t.Fatal("the datagrams never reached the peer")
	}
	got := c.show(fmt.Sprintf("udp port %d", ports[0]))
	if !strings.Contains(got, fmt.Sprintf(".%d > %v.9:", ports[0], listenerAddr)) ||
		strings.Contains(got, fmt.Sprintf(".%d >", ports[1])) || !strings.Contains(got, "packets captured") {
		t.Errorf("the capture of port %d (not %d):\n%s", ports[0], ports[1], got)
	}
}
