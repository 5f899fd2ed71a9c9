// SPDX-License-Identifier: Apache-2.0

package maps_test

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

// ACKs that carry a SYN cookie back, through the real program and the
// kernel's own cookie check. BPF_PROG_TEST_RUN judges a frame as received
// in the calling thread's network namespace, so each test runs the program
// from inside a namespace of its own, where it listens on port 8080.

// listenIn opens a dual-stack listener on port 8080 in ns; it closes when
// the test ends.
func listenIn(t *testing.T, ns *testutil.Netns) net.Listener {
	t.Helper()
	var ln net.Listener
	if err := ns.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", ":8080")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// ackOf is the client's ACK to synAck, the SYN-ACK answering syn, with its
// acknowledgment number moved by skew (0: the cookie + 1, as a real client
// sends it). A cookie's low bits pick the MSS from a table, so a small skew
// can still be a valid cookie (of another MSS): wrongCookie is not.
func ackOf(syn pktgen.Frame, synAck []byte, skew uint32) pktgen.Frame {
	off := len(synAck) - 40 // the answer to cookieSYN: a 40-byte TCP header last
	cookie := binary.BigEndian.Uint32(synAck[off+4:])
	a := syn
	a.TCPFlags, a.TCPSeq, a.TCPAck = pktgen.TCPAck, syn.TCPSeq+1, cookie+1+skew
	a.TCPOptions = []pktgen.TCPOption{pktgen.OptNOP(), pktgen.OptNOP(), pktgen.OptTimestamps(12346, 0)}
	return a
}

const wrongCookie = 1 << 20

func TestSynCookieACK(t *testing.T) {
	for _, c := range []struct{ name, client, server string }{
		{"IPv4", "192.0.2.7", "198.51.100.1"},
		{"IPv6", "2001:db8::7", "2001:db8::1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns := testutil.NewNetns(t)
			listenIn(t, ns)
			// Every drop sampled, for the check of the sample below.
			l := load(t, maps.ClockMap, "log: {sample: 1}\n"+cookiePolicy)
			syn := cookieSYN(c.client, c.server)
			var answer []byte
			run := func(f pktgen.Frame) uint32 {
				var v uint32
				if err := ns.Do(func() error {
					v, _ = runOut(t, l, f.MustBuild(), t0)
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				return v
			}
			if err := ns.Do(func() error { answer = answered(t, l, syn.MustBuild(), t0); return nil }); err != nil {
				t.Fatal(err)
			}

			if v := run(ackOf(syn, answer, 0)); v != xdpPass {
				t.Errorf("the ACK with the cookie: verdict %d, want XDP_PASS", v)
			}
			if v := run(ackOf(syn, answer, wrongCookie)); v != xdpDrop {
				t.Errorf("an ACK with a wrong cookie: verdict %d, want XDP_DROP", v)
			}
			// To a port the cookie rule does not answer for: not ours.
			other := ackOf(syn, answer, wrongCookie)
			other.DstPort = 9090
			if v := run(other); v != xdpPass {
				t.Errorf("an ACK to another port: verdict %d, want XDP_PASS", v)
			}
			stats, err := l.RuleStats()
			if err != nil {
				t.Fatal(err)
			}
			if got := stats[0].CookieACKs; got != [2]uint64{1, 1} {
				t.Errorf("rule's cookie ACKs valid, invalid = %v, want [1 1]", got)
			}
			if v, i := counter(t, l, maps.CounterCookieACKValid), counter(t, l, maps.CounterCookieACKInvalid); v != 1 || i != 1 {
				t.Errorf("global cookie ACKs valid %d, invalid %d; want 1, 1", v, i)
			}
			samples, _, _, err := l.DropRing(nil)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, s := range samples {
				if s.Level == maps.CookieACKLevel && s.Verdict == maps.VerdictDrop && s.DstPort == 8080 {
					found = true
				}
			}
			if !found {
				t.Errorf("no drop sample of the wrong cookie among %+v", samples)
			}
		})
	}
}

// TestSynCookieACKOfConnection: an ACK of a connection the stack holds is
// its own, whatever its acknowledgment number: never checked as a cookie.
func TestSynCookieACKOfConnection(t *testing.T) {
	ns := testutil.NewNetns(t)
	ln := listenIn(t, ns)
	l := load(t, maps.ClockMap, cookiePolicy)
	var conn net.Conn
	if err := ns.Do(func() error {
		var err error
		conn, err = net.Dial("tcp", "127.0.0.1:8080")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	accepted, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer accepted.Close()
	local := netip.MustParseAddrPort(conn.LocalAddr().String())
	ack := pktgen.Frame{Src: local.Addr(), Dst: netip.MustParseAddr("127.0.0.1"), Proto: pktgen.ProtoTCP,
		SrcPort: local.Port(), DstPort: 8080, TCPFlags: pktgen.TCPAck, TCPSeq: 5, TCPAck: 7}
	var v uint32
	if err := ns.Do(func() error { v, _ = runOut(t, l, ack.MustBuild(), t0); return nil }); err != nil {
		t.Fatal(err)
	}
	if v != xdpPass {
		t.Errorf("verdict %d, want XDP_PASS", v)
	}
	if n := counter(t, l, maps.CounterCookieACKInvalid) + counter(t, l, maps.CounterCookieACKValid); n != 0 {
		t.Errorf("the connection's ACK was checked as a cookie (%d)", n)
	}
}

// Which ACKs the cookie check takes, with listeners on two ports: only
// those to a port whose SYNs the first matching rule answers with cookies.
// An ACK with a wrong cookie to a port no cookie rule names, or whose SYN
// an earlier rule takes, reaches its listener (which answers it as the
// stack does), and is not counted.
func TestSynCookieACKRules(t *testing.T) {
	for _, c := range []struct {
		name, policy string
		drop         map[uint16]bool // by the ACK's port
	}{
		{"the cookie rule names one port", cookiePolicy, map[uint16]bool{8080: true, 9090: false}},
		{"an earlier rule takes the other port's SYNs", `
rules:
  - {name: other, match: {protocol: tcp, dst_ports: [9090], tcp_flags: [syn]}, limit: {algorithm: token_bucket, rate: 1/m, burst: 1}}
  - {name: syn, match: {protocol: tcp, dst_ports: [8080, 9090], tcp_flags: [syn]}, limit: {algorithm: token_bucket, rate: 1/m, burst: 1}, action: syncookie}
`, map[uint16]bool{8080: true, 9090: false}},
		{"the cookie rule names no port", `
rules:
  - {name: web, match: {protocol: tcp, dst_ports: [443]}, limit: {algorithm: token_bucket, rate: 1/m, burst: 1}}
  - {name: syn, match: {protocol: tcp, tcp_flags: [syn]}, limit: {algorithm: token_bucket, rate: 1/m, burst: 1}, action: syncookie}
`, map[uint16]bool{8080: true, 9090: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns := testutil.NewNetns(t)
			listenIn(t, ns)
			if err := ns.Do(func() error {
				ln, err := net.Listen("tcp", ":9090")
				if err == nil {
					t.Cleanup(func() { ln.Close() })
				}
				return err
			}); err != nil {
				t.Fatal(err)
			}
			l := load(t, maps.ClockMap, c.policy)
			syn := cookieSYN("192.0.2.7", "198.51.100.1")
			var answer []byte
			if err := ns.Do(func() error { answer = answered(t, l, syn.MustBuild(), t0); return nil }); err != nil {
				t.Fatal(err)
			}
			invalid := uint64(0)
			for _, port := range []uint16{8080, 9090} {
				a := ackOf(syn, answer, wrongCookie)
				a.DstPort = port
				var v uint32
				if err := ns.Do(func() error { v, _ = runOut(t, l, a.MustBuild(), t0); return nil }); err != nil {
					t.Fatal(err)
				}
				want := uint32(xdpPass)
				if c.drop[port] {
					want, invalid = xdpDrop, invalid+1
				}
				if v != want {
					t.Errorf("an ACK with a wrong cookie to port %d: verdict %d, want %d", port, v, want)
				}
			}
			if i := counter(t, l, maps.CounterCookieACKInvalid); i != invalid {
				t.Errorf("invalid cookie ACKs counted %d, want %d", i, invalid)
			}
		})
	}
}
