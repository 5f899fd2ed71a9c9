// SPDX-License-Identifier: Apache-2.0

package testutil

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"
)

// TestNetnsCleanup checks the tb.Cleanup wrapper: a namespace NewNetns
// made is gone once its test has ended. internal/netns tests the rest.
func TestNetnsCleanup(t *testing.T) {
	RequireRoot(t)
	var ns *Netns
	t.Run("create", func(t *testing.T) {
		ns = NewNetns(t)
		if !strings.HasPrefix(ns.Name(), NetnsPrefix) {
			t.Errorf("name %q lacks prefix %q", ns.Name(), NetnsPrefix)
		}
		if _, err := os.Stat(ns.Path()); err != nil {
			t.Fatal(err)
		}
	})
	if _, err := os.Stat(ns.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still exists after cleanup (err %v)", ns.Path(), err)
	}
	if err := ns.Do(func() error { return nil }); err == nil {
		t.Error("Do on a deleted namespace succeeded")
	}
}

// TestCountersMove sends UDP datagrams over real sockets from one namespace
// to the other and checks the receiver's counters see them and the
// sender's do not.
func TestCountersMove(t *testing.T) {
	v := NewVethPair(t, VethConfig{})
	const n = 20

	for _, tc := range []struct {
		name string
		dst  netip.Addr
		get  func(Counters) (received, noPorts uint64)
	}{
		{"IPv4", v.PeerAddr, func(c Counters) (uint64, uint64) { return c.IPInReceives, c.UDPNoPorts }},
		{"IPv6", v.PeerAddr6, func(c Counters) (uint64, uint64) { return c.IP6InReceives, c.UDP6NoPorts }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// One datagram to a listening socket, the rest to a closed port.
			var conn *net.UDPConn
			if err := v.PeerNS.Do(func() error {
				var err error
				conn, err = net.ListenUDP("udp", &net.UDPAddr{IP: tc.dst.AsSlice(), Port: 9000})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer conn.Close()

			before := v.PeerNS.Snapshot(t)
			senderBefore := v.NS.Snapshot(t)
			if err := v.NS.Do(func() error {
				c, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: tc.dst.AsSlice(), Port: 9000})
				if err != nil {
					return err
				}
				defer c.Close()
				if _, err := c.Write([]byte("hello")); err != nil {
					return err
				}
				// Unconnected: a connected socket would report the ICMP
				// port-unreachable replies as errors and drop later sends.
				unconn, err := net.ListenUDP("udp", nil)
				if err != nil {
					return err
				}
				defer unconn.Close()
				closed := &net.UDPAddr{IP: tc.dst.AsSlice(), Port: 9001}
				for i := 0; i < n-1; i++ {
					if _, err := unconn.WriteToUDP([]byte("x"), closed); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}

			conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			buf := make([]byte, 64)
			m, _, err := conn.ReadFromUDP(buf)
			if err != nil || string(buf[:m]) != "hello" {
				t.Fatalf("read %q, %v", buf[:m], err)
			}

			d := v.PeerNS.Snapshot(t).Delta(before)
			received, noPorts := tc.get(d)
			t.Logf("receiver delta: received %d, no ports %d, datagrams %d/%d",
				received, noPorts, d.UDPInDatagrams, d.UDP6InDatagrams)
			if received < n {
				t.Errorf("receiver saw %d packets, want >= %d", received, n)
			}
			if noPorts != n-1 {
				t.Errorf("receiver counted %d datagrams to a closed port, want %d", noPorts, n-1)
			}
			if got := d.UDPInDatagrams + d.UDP6InDatagrams; got != 1 {
				t.Errorf("receiver read %d datagrams, want 1", got)
			}
			sd := v.NS.Snapshot(t).Delta(senderBefore)
			if sd.UDPNoPorts+sd.UDP6NoPorts != 0 {
				t.Errorf("sender counted UDP datagrams: %+v", sd)
			}
		})
	}
}

func TestRequireFailsInCI(t *testing.T) {
	// Run Require against a fake TB to observe Fatalf vs Skipf.
	for _, ci := range []string{"", "true"} {
		t.Setenv("CI", ci)
		f := &fakeTB{TB: t}
		func() {
			defer func() { recover() }()
			Require(f, false, "reason %d", 1)
		}()
		if ci == "" && (!f.skipped || f.failed) {
			t.Errorf("CI unset: skipped=%v failed=%v, want a skip", f.skipped, f.failed)
		}
		if ci != "" && (!f.failed || f.skipped) {
			t.Errorf("CI set: skipped=%v failed=%v, want a failure", f.skipped, f.failed)
		}
		if !strings.Contains(f.msg, "reason 1") {
			t.Errorf("message %q lacks the reason", f.msg)
		}
	}
}

type fakeTB struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Skipf(format string, args ...any) {
	f.skipped = true
	f.msg = fmt.Sprintf(format, args...)
	panic("skip")
}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = true
	f.msg = fmt.Sprintf(format, args...)
	panic("fatal")
}

func TestRequireLiveFrames(t *testing.T) {
	RequireLiveFrames(t)
}

// WaitLogged returns once the line is out, also when the process ended
// right after it, and fails naming the process when it ended before the
// line or the time ran out.
func TestWaitLogged(t *testing.T) {
	never := func() (bool, error) { return false, nil }
	gone := func() (bool, error) { return true, errors.New("exit status 2") }
	for _, tc := range []struct {
		name   string
		out    string
		ended  func() (bool, error)
		failed string
	}{
		{"logged", "msg=attached \n", never, ""},
		{"logged, then ended", "msg=attached \n", gone, ""},
		{"ended before", "starting\n", gone, `p exited (exit status 2) before "msg=attached "`},
		{"timed out", "starting\n", never, `no "msg=attached " from p after 50ms`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out SyncBuffer
			out.Write([]byte(tc.out))
			f := &fakeTB{TB: t}
			func() {
				defer func() { recover() }()
				WaitLogged(f, "p", &out, tc.ended, "msg=attached ", 50*time.Millisecond)
			}()
			if f.failed != (tc.failed != "") || !strings.Contains(f.msg, tc.failed) {
				t.Errorf("failed %v with %q, want %q", f.failed, f.msg, tc.failed)
			}
		})
	}
}
