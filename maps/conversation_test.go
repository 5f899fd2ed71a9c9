// SPDX-License-Identifier: Apache-2.0

package maps_test

import (
	"net"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

// The conversation checks through the real program and the kernel's own
// socket tables: BPF_PROG_TEST_RUN looks sockets up in the calling thread's
// network namespace, so each test runs the program inside a namespace of
// its own, with a TCP listener on 8080, an established connection to it
// over loopback and a UDP socket bound to 5353.

const convPolicy = `
conversations: {tcp: always, udp: always}
log: {sample: 1}
rules: []
`

// convLab is a namespace with sockets, and a limiter whose local table
// holds the namespace's addresses.
type convLab struct {
	t      *testing.T
	ns     *testutil.Netns
	l      *maps.Limiter
	client netip.AddrPort // the established connection's client end
}

func newConvLab(t *testing.T, policy string) *convLab {
	t.Helper()
	return newConvLabIn(t, testutil.NewNetns(t), policy)
}

// newConvLabIn is newConvLab in ns, which the caller prepared.
func newConvLabIn(t *testing.T, ns *testutil.Netns, policy string) *convLab {
	t.Helper()
	ln := listenIn(t, ns)
	var conn net.Conn
	var udp net.PacketConn
	if err := ns.Do(func() error {
		var err error
		if udp, err = net.ListenPacket("udp", ":5353"); err != nil {
			return err
		}
		conn, err = net.Dial("tcp", "127.0.0.1:8080")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); udp.Close() })
	accepted, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { accepted.Close() })
	lab := &convLab{t: t, ns: ns, l: load(t, maps.ClockMap, policy),
		client: netip.MustParseAddrPort(conn.LocalAddr().String())}
	local := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("198.51.100.1/32"),
		netip.MustParsePrefix("2001:db8::1/128"), netip.MustParsePrefix("::1/128")}
	if err := lab.l.SetLocal(local); err != nil {
		t.Fatal(err)
	}
	return lab
}

// run judges frames in the lab's namespace on CPU 0 (each CPU keeps its
// own count of the packets a check that is not armed lets by).
func (c *convLab) run(frames ...pktgen.Frame) []uint32 {
	c.t.Helper()
	var out []uint32
	if err := c.ns.Do(func() error {
		var set unix.CPUSet
		set.Set(0)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			return err
		}
		for _, f := range frames {
			v, _ := runOut(c.t, c.l, f.MustBuild(), t0)
			out = append(out, v)
		}
		return nil
	}); err != nil {
		c.t.Fatal(err)
	}
	return out
}

func tcpTo(src, dst string, dport uint16, flags pktgen.TCPFlags) pktgen.Frame {
	return pktgen.Frame{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst), Proto: pktgen.ProtoTCP,
		SrcPort: 40001, DstPort: dport, TCPFlags: flags, TCPSeq: 5, TCPAck: 7}
}

func udpTo(src, dst string, dport uint16) pktgen.Frame {
	return pktgen.Frame{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst), Proto: pktgen.ProtoUDP,
		SrcPort: 53, DstPort: dport, Payload: 32}
}

func TestConversationVerdicts(t *testing.T) {
	lab := newConvLab(t, convPolicy)
	established := pktgen.Frame{Src: lab.client.Addr(), Dst: netip.MustParseAddr("127.0.0.1"), Proto: pktgen.ProtoTCP,
		SrcPort: lab.client.Port(), DstPort: 8080, TCPFlags: pktgen.TCPAck | pktgen.TCPPsh, TCPSeq: 5, TCPAck: 7}
	cases := []struct {
		name string
		f    pktgen.Frame
		want uint32
	}{
		{"established connection's data", established, xdpPass},
		{"established connection's FIN", with(established, func(f *pktgen.Frame) { f.TCPFlags = pktgen.TCPFin | pktgen.TCPAck }), xdpPass},
		{"ACK to the listener, no cookie", tcpTo("192.0.2.7", "198.51.100.1", 8080, pktgen.TCPAck), xdpDrop},
		{"RST to the listener", tcpTo("192.0.2.7", "198.51.100.1", 8080, pktgen.TCPRst), xdpDrop},
		{"SYN to the listener", tcpTo("192.0.2.7", "198.51.100.1", 8080, pktgen.TCPSyn), xdpPass},
		{"ACK to a closed port", tcpTo("192.0.2.7", "198.51.100.1", 9999, pktgen.TCPAck), xdpDrop},
		{"FIN to a closed port", tcpTo("192.0.2.7", "198.51.100.1", 9999, pktgen.TCPFin), xdpDrop},
		{"SYN-ACK to a closed port", tcpTo("192.0.2.7", "198.51.100.1", 9999, pktgen.TCPSyn|pktgen.TCPAck), xdpDrop},
		{"SYN to a closed port", tcpTo("192.0.2.7", "198.51.100.1", 9999, pktgen.TCPSyn), xdpPass},
		{"IPv6 ACK to a closed port", tcpTo("2001:db8::7", "2001:db8::1", 9999, pktgen.TCPAck), xdpDrop},
		{"IPv6 ACK to the listener", tcpTo("2001:db8::7", "2001:db8::1", 8080, pktgen.TCPAck), xdpDrop},
		{"ACK to an address not this host's", tcpTo("192.0.2.7", "203.0.113.9", 9999, pktgen.TCPAck), xdpPass},
		{"UDP to the bound port", udpTo("192.0.2.7", "198.51.100.1", 5353), xdpPass},
		{"IPv6 UDP to the bound port", udpTo("2001:db8::7", "2001:db8::1", 5353), xdpPass},
		{"UDP to a closed port", udpTo("192.0.2.7", "198.51.100.1", 5354), xdpDrop},
		{"IPv6 UDP to a closed port", udpTo("2001:db8::7", "2001:db8::1", 5354), xdpDrop},
		{"UDP to an address not this host's", udpTo("192.0.2.7", "203.0.113.9", 5354), xdpPass},
		{"UDP to a multicast group", udpTo("192.0.2.7", "224.0.0.251", 5354), xdpPass},
	}
	for _, c := range cases {
		if v := lab.run(c.f)[0]; v != c.want {
			t.Errorf("%s: verdict %d, want %d", c.name, v, c.want)
		}
	}
	if n := counter(t, lab.l, maps.CounterNoConnection); n != 7 {
		t.Errorf("no_connection counted %d, want 7", n)
	}
	if n := counter(t, lab.l, maps.CounterNoSocket); n != 2 {
		t.Errorf("no_socket counted %d, want 2", n)
	}
	samples, _, _, err := lab.l.DropRing(nil)
	if err != nil {
		t.Fatal(err)
	}
	byLevel := map[int]int{}
	for _, s := range samples {
		if name, ok := s.ListName(); ok {
			byLevel[s.Level]++
			if want := map[int]string{maps.NoConnectionLevel: maps.ListNoConnection, maps.NoSocketLevel: maps.ListNoSocket}[s.Level]; name != want {
				t.Errorf("sample %+v named %q, want %q", s, name, want)
			}
		}
	}
	if byLevel[maps.NoConnectionLevel] != 7 || byLevel[maps.NoSocketLevel] != 2 {
		t.Errorf("drop samples by level %v, want 7 no_connection and 2 no_socket", byLevel)
	}
}

// TestConversationCookieACK: an ACK to a listener that carries a valid
// cookie back opens a connection, and passes.
func TestConversationCookieACK(t *testing.T) {
	lab := newConvLab(t, "conversations: {tcp: always}\n"+cookiePolicy)
	syn := cookieSYN("192.0.2.7", "198.51.100.1")
	var answer []byte
	if err := lab.ns.Do(func() error { answer = answered(t, lab.l, syn.MustBuild(), t0); return nil }); err != nil {
		t.Fatal(err)
	}
	v := lab.run(ackOf(syn, answer, 0), ackOf(syn, answer, wrongCookie))
	if v[0] != xdpPass || v[1] != xdpDrop {
		t.Errorf("ACK with the cookie, with a wrong one: verdicts %v, want [%d %d]", v, xdpPass, xdpDrop)
	}
}

// TestConversationUnderAttack: a check that is not armed drops nothing and
// looks up one packet in ConvWatchEvery, whose misses its watch counts at
// that weight for the destination; armed, it drops each.
func TestConversationUnderAttack(t *testing.T) {
	lab := newConvLab(t, "conversations: {udp: under_attack}\nrules: []\n")
	closed := udpTo("192.0.2.7", "198.51.100.1", 5354)
	frames := make([]pktgen.Frame, 2*maps.ConvWatchEvery)
	for i := range frames {
		frames[i] = closed
	}
	for i, v := range lab.run(frames...) {
		if v != xdpPass {
			t.Fatalf("packet %d while not armed: verdict %d, want XDP_PASS", i, v)
		}
	}
	if n := counter(t, lab.l, maps.CounterConvLookups); n != 2 {
		t.Errorf("%d packets looked up of %d, want 2", n, len(frames))
	}
	watch, err := lab.l.ConvWatch(maps.CheckUDP)
	if err != nil {
		t.Fatal(err)
	}
	var total uint64
	for _, s := range watch {
		total += s.Packets
		if s.Packets != 0 && (s.Destination != closed.Dst || s.Port != 5354 || s.Protocol != 17) {
			t.Errorf("watch slot %+v, want %v:5354/udp", s, closed.Dst)
		}
	}
	if total != uint64(len(frames)) {
		t.Errorf("watch counts %d packets, want %d", total, len(frames))
	}
	if err := lab.l.SetConvArmed(maps.CheckUDP); err != nil {
		t.Fatal(err)
	}
	if v := lab.run(closed, udpTo("192.0.2.7", "198.51.100.1", 5353)); v[0] != xdpDrop || v[1] != xdpPass {
		t.Errorf("armed: closed port, open port verdicts %v, want [%d %d]", v, xdpDrop, xdpPass)
	}
	if err := lab.l.SetConvArmed(); err != nil {
		t.Fatal(err)
	}
	if v := lab.run(closed); v[0] != xdpPass {
		t.Errorf("disarmed: verdict %d, want XDP_PASS", v[0])
	}
}

// TestConversationShadow: a check in shadow counts what it would drop, and
// the rules then judge the packet; a policy in shadow drops nothing.
func TestConversationShadow(t *testing.T) {
	lab := newConvLab(t, `
conversations: {udp: {when: always, action: shadow}}
rules:
  - name: udp-cap
    match: {protocol: udp}
    limit: {algorithm: token_bucket, rate: 1/m, burst: 1}
`)
	closed := udpTo("192.0.2.7", "198.51.100.1", 5354)
	if v := lab.run(closed, closed); v[0] != xdpPass || v[1] != xdpDrop {
		t.Errorf("verdicts %v, want [%d %d]: the rule judges after the shadow check", v, xdpPass, xdpDrop)
	}
	if n := counter(t, lab.l, maps.CounterNoSocketShadow); n != 2 {
		t.Errorf("no_socket_shadow %d, want 2", n)
	}
	if n := counter(t, lab.l, maps.CounterNoSocket); n != 0 {
		t.Errorf("no_socket %d, want 0", n)
	}

	whole := newConvLab(t, "mode: shadow\n"+convPolicy)
	if v := whole.run(closed); v[0] != xdpPass {
		t.Errorf("mode shadow: verdict %d, want XDP_PASS", v[0])
	}
	if n := counter(t, whole.l, maps.CounterNoSocketShadow); n != 1 {
		t.Errorf("mode shadow: no_socket_shadow %d, want 1", n)
	}
}

// TestLocalTable: SetLocal makes the table exactly what it is given.
func TestLocalTable(t *testing.T) {
	l := load(t, maps.ClockMap, "rules: []\n")
	a := []netip.Prefix{netip.MustParsePrefix("10.0.0.1/32"), netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("fe80::1/128")}
	b := []netip.Prefix{netip.MustParsePrefix("10.0.0.2/32"), netip.MustParsePrefix("127.0.0.0/8")}
	for _, want := range [][]netip.Prefix{a, b, nil} {
		if err := l.SetLocal(want); err != nil {
			t.Fatal(err)
		}
		got, err := l.Local()
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("table %v, want %v", got, want)
		}
		for _, p := range want {
			found := false
			for _, g := range got {
				found = found || g == p
			}
			if !found {
				t.Errorf("table %v lacks %v", got, p)
			}
		}
	}
}
