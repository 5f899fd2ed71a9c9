// SPDX-License-Identifier: Apache-2.0

package maps_test

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

// TestConversationConntrack: with forwarded: conntrack, what is not
// addressed to this host is judged by the kernel's connection tracking,
// through the real kfunc: segments and reflector answers of conversations
// conntrack saw (a TCP connection and a UDP exchange over loopback, which
// the lab's local table leaves out so that they count as forwarded) pass
// in both directions; those of no conversation are dropped.
func TestConversationConntrack(t *testing.T) {
	ns := testutil.NewNetns(t)
	ns.TrackConnections(t)
	lab := newConvLabIn(t, ns, `
conversations:
  tcp: {when: always, forwarded: conntrack}
  reflection: {when: always, forwarded: conntrack}
log: {sample: 1}
rules: []
`)
	if err := lab.l.SetLocal([]netip.Prefix{netip.MustParsePrefix("198.51.100.1/32")}); err != nil {
		t.Fatal(err)
	}
	asker := udpExchange(t, ns)
	loop := netip.MustParseAddr("127.0.0.1")
	established := pktgen.Frame{Src: lab.client.Addr(), Dst: loop, Proto: pktgen.ProtoTCP,
		SrcPort: lab.client.Port(), DstPort: 8080, TCPFlags: pktgen.TCPAck, TCPSeq: 5, TCPAck: 7}
	answer := pktgen.Frame{Src: loop, Dst: asker.Addr(), Proto: pktgen.ProtoUDP, SrcPort: 53, DstPort: asker.Port(), Payload: 32}
	cases := []struct {
		name string
		f    pktgen.Frame
		want uint32
	}{
		{"a tracked connection's ACK", established, xdpPass},
		{"its ACK the other way", with(established, func(f *pktgen.Frame) {
			f.Src, f.Dst, f.SrcPort, f.DstPort = f.Dst, f.Src, f.DstPort, f.SrcPort
		}), xdpPass},
		{"an ACK of no tracked connection", with(established, func(f *pktgen.Frame) { f.SrcPort++ }), xdpDrop},
		{"an ACK to another host", tcpTo("192.0.2.7", "203.0.113.9", 80, pktgen.TCPAck), xdpDrop},
		{"a SYN to another host", tcpTo("192.0.2.7", "203.0.113.9", 80, pktgen.TCPSyn), xdpPass},
		{"an answer to a tracked request", answer, xdpPass},
		{"an answer from another server", with(answer, func(f *pktgen.Frame) { f.Src = netip.MustParseAddr("127.0.0.2") }), xdpDrop},
		{"an answer to another host", udpTo("192.0.2.7", "203.0.113.9", 40000), xdpDrop},
		{"a request to another host", with(udpTo("192.0.2.7", "203.0.113.9", 53), func(f *pktgen.Frame) { f.SrcPort = 40000 }), xdpPass},
	}
	for _, c := range cases {
		if v := lab.run(c.f)[0]; v != c.want {
			t.Errorf("%s: verdict %d, want %d", c.name, v, c.want)
		}
	}
	if n := counter(t, lab.l, maps.CounterNoConnection); n != 2 {
		t.Errorf("no_connection counted %d, want 2", n)
	}
	if n := counter(t, lab.l, maps.CounterNoRequest); n != 2 {
		t.Errorf("no_request counted %d, want 2", n)
	}
	cv, err := lab.l.ConversationsInForce()
	if err != nil || !cv.TCP.Conntrack || !cv.Reflection.Conntrack || cv.UDP.Conntrack {
		t.Errorf("in force: %+v, %v; want conntrack for tcp and reflection", cv, err)
	}
}

// udpExchange sends one datagram in ns from a socket of its own to a
// server on 127.0.0.1:53, which conntrack records, and returns the
// asking socket's address.
func udpExchange(t *testing.T, ns *testutil.Netns) netip.AddrPort {
	t.Helper()
	var asker netip.AddrPort
	if err := ns.Do(func() error {
		srv, err := net.ListenPacket("udp4", "127.0.0.1:53")
		if err != nil {
			return err
		}
		t.Cleanup(func() { srv.Close() })
		c, err := net.Dial("udp4", "127.0.0.1:53")
		if err != nil {
			return err
		}
		t.Cleanup(func() { c.Close() })
		asker = netip.MustParseAddrPort(c.LocalAddr().String())
		_, err = c.Write([]byte("query"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return asker
}

// TestConversationConntrackRefused: the UDP check cannot judge forwarded
// datagrams by conntrack, and the limiter refuses an image that asks,
// leaving the policy in force as it was.
func TestConversationConntrackRefused(t *testing.T) {
	l := load(t, maps.ClockMap, "conversations: {udp: always}\nrules: []\n")
	img := xdpltest.Compile(t, "conversations: {udp: always}\nrules: []\n")
	img.Conversations.UDP.Conntrack = true
	if err := l.Apply(img); err == nil || !strings.Contains(err.Error(), "only for the tcp check and the reflection guard") {
		t.Fatalf("apply: %v, want a refusal", err)
	}
	if cv, err := l.ConversationsInForce(); err != nil || !cv.UDP.On || cv.UDP.Conntrack {
		t.Fatalf("in force after the refusal: %+v, %v", cv, err)
	}
}

// TestConversationConntrackUnavailable: a program loaded without conntrack
// lookups cannot make them, and the limiter refuses a policy that asks,
// naming what is missing, and keeps the one in force.
func TestConversationConntrackUnavailable(t *testing.T) {
	l := load(t, maps.ClockMap, "conversations: {tcp: always}\nrules: []\n")
	missing := errors.New("conntrack lookups need the nf_conntrack module, which is not loaded (modprobe nf_conntrack)")
	t.Cleanup(maps.LoadedWithoutConntrack(l, missing))
	img := xdpltest.Compile(t, "conversations: {tcp: {when: always, forwarded: conntrack}}\nrules: []\n")
	err := l.Apply(img)
	if err == nil || (!strings.Contains(err.Error(), "modprobe nf_conntrack") && !strings.Contains(err.Error(), "detach and attach again")) {
		t.Fatalf("apply: %v, want a refusal naming what is missing", err)
	}
	if cv, err := l.ConversationsInForce(); err != nil || !cv.TCP.On || cv.TCP.Conntrack {
		t.Fatalf("in force after the refusal: %+v, %v", cv, err)
	}
	// Without conntrack the same check for this host's own traffic is
	// accepted.
	if err := l.Apply(xdpltest.Compile(t, "conversations: {tcp: always, udp: always}\nrules: []\n")); err != nil {
		t.Fatal(err)
	}
}
