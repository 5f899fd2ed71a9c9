// SPDX-License-Identifier: Apache-2.0

package replay

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
)

// The captures operators make: tcpdump -i any, in both Linux cooked
// formats, of datagrams this test sends between two namespaces of its own
// to an echo server, so that the capture holds the host's outgoing echoes
// beside what it received. The received datagrams are judged; the echoes
// are counted and not run.
func TestReplayTcpdumpAny(t *testing.T) {
	testutil.RequireRoot(t)
	tcpdump, err := exec.LookPath("tcpdump")
	testutil.Require(t, err == nil, "tcpdump is not installed (make deps installs it)")
	nsenter, err := exec.LookPath("nsenter")
	testutil.Require(t, err == nil, "nsenter is not installed (util-linux)")
	v := testutil.NewVethPair(t, testutil.VethConfig{})
	const sends = 5

	for _, c := range []struct {
		flag     string
		linkType uint32
	}{{"LINUX_SLL2", 276}, {"LINUX_SLL", 113}} {
		t.Run(c.flag, func(t *testing.T) {
			port := echoServer(t, v)
			path := filepath.Join(t.TempDir(), "any.pcap")
			// Bounded by count (requests and echoes) and by a hard
			// timeout.
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			wait := startTcpdump(ctx, t, nsenter, "--net="+v.PeerNS.Path(), tcpdump, "-i", "any", "-y", c.flag,
				"-n", "-U", "-Z", "root", "-c", fmt.Sprint(2*sends), "-w", path, fmt.Sprintf("udp port %d", port))
			if err := sendEchoed(v, port, sends); err != nil {
				cancel()
				wait()
				t.Fatal(err)
			}
			if err := wait(); err != nil {
				t.Fatalf("tcpdump: %v", err)
			}

			data := readFile(t, path)
			if len(data) < 24 || binary.LittleEndian.Uint32(data[20:24]) != c.linkType {
				t.Fatalf("tcpdump wrote no pcap of link type %d: % x", c.linkType, data[:min(len(data), 24)])
			}
			p := parsePolicy(t, fmt.Sprintf(`
rules:
  - name: echo
    match: {protocol: udp, dst_ports: [%d]}
    limit: {algorithm: token_bucket, rate: 1/h, burst: 3}
`, port))
			r := replayFile(t, p, path, Options{})
			// IPv4 + UDP + 8 bytes of payload behind an Ethernet header.
			const frameLen = 14 + 20 + 8 + 8
			if r.Frames != 2*sends || r.NoLinkLayer != 2*sends || r.Outgoing != (Counts{sends, sends * frameLen}) {
				t.Errorf("%d frames, %d without layer 2, outgoing %+v", r.Frames, r.NoLinkLayer, r.Outgoing)
			}
			echo := r.Rules[0]
			if echo.Pass != (Counts{3, 3 * frameLen}) || echo.Drop != (Counts{2, 2 * frameLen}) || r.Unmatched.Packets != 0 {
				t.Errorf("echo rule: pass %+v, drop %+v; unmatched %+v", echo.Pass, echo.Drop, r.Unmatched)
			}
		})
	}
}

// startTcpdump starts tcpdump (through nsenter, which execs it: ctx kills
// it by its PID) and returns once it listens, with a function that waits
// for it to exit. Pdeathsig fires when the forking thread exits, and the
// namespace helpers end threads: tcpdump is started and reaped on a thread
// of its own, locked until then, so it dies with the test process only.
func startTcpdump(ctx context.Context, t *testing.T, name string, args ...string) (wait func() error) {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stderr = pw
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started, done := make(chan error, 1), make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		done <- cmd.Wait()
	}()
	err = <-started
	pw.Close() // tcpdump has its own copy: pr ends when it exits
	if err != nil {
		t.Fatal(err)
	}
	wait = func() error { return <-done }
	// tcpdump says "listening on any" once its socket is open: what is
	// sent from then on is captured.
	lines := bufio.NewScanner(pr)
	var said []string
	for lines.Scan() {
		said = append(said, lines.Text())
		if strings.Contains(lines.Text(), "listening on any") {
			// Read on to the end, so that its summary never meets a
			// closed pipe.
			go func() {
				for lines.Scan() {
				}
				pr.Close()
			}()
			return wait
		}
	}
	pr.Close()
	t.Fatalf("tcpdump did not start: %v\n%s", wait(), strings.Join(said, "\n"))
	return nil
}

// echoServer answers UDP datagrams in the receiving namespace, until the
// test ends, and returns its port.
func echoServer(t *testing.T, v *testutil.Veth) int {
	t.Helper()
	var conn *net.UDPConn
	err := v.PeerNS.Do(func() (err error) {
		conn, err = net.ListenUDP("udp4", &net.UDPAddr{IP: v.PeerAddr.AsSlice()})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := conn.ReadFromUDP(buf)
			if err != nil {
				return
			}
			conn.WriteToUDP(buf[:n], from)
		}
	}()
	return conn.LocalAddr().(*net.UDPAddr).Port
}

// sendEchoed sends n datagrams of 8 bytes from the sending namespace, each
// after the echo of the one before.
func sendEchoed(v *testutil.Veth, port, n int) error {
	var conn *net.UDPConn
	err := v.NS.Do(func() (err error) {
		conn, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: v.PeerAddr.AsSlice(), Port: port})
		return err
	})
	if err != nil {
		return err
	}
	defer conn.Close()
	buf := make([]byte, 64)
	for i := range n {
		if _, err := fmt.Fprintf(conn, "ping %03d", i); err != nil {
			return err
		}
		// A deadline only so that a broken lab fails instead of hanging.
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := conn.Read(buf); err != nil {
			return fmt.Errorf("datagram %d: no echo: %w", i, err)
		}
	}
	return nil
}
