// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/internal/netns"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

// Conversation checks (docs/conversations.md): what each check costs per
// packet, on the packet it drops and on the real traffic it passes, each
// check alone in its program with `when: always` so that every packet is
// judged. The socket lookups of BPF_PROG_TEST_RUN search the network
// namespace of the calling thread, so these cases run in a namespace of
// their own (convLab) that holds the sockets the passing packets belong to.

const convGroup = "Conversation checks (`when: always`, one check per program, the sockets in a namespace of the benchmark's)"

const (
	mConvTCPParser = "TCP ACK, the parser alone, then XDP_DROP"
	mConvTCPDrop   = "tcp: a forged ACK to a local address, no socket (drop, no_connection)"
	mConvTCPNone   = "an ACK of an established connection, no check (empty policy, pass)"
	mConvTCPPass   = "tcp: an ACK of an established connection (its socket found, pass)"
	mConvCTDrop    = "tcp, forwarded: conntrack: a forged ACK to a non-local address, no conntrack entry (drop, no_connection)"
	mConvUDPDrop   = "udp: a datagram to a local closed port (drop, no_socket)"
	mConvUDPPass   = "udp: a datagram to a bound socket (pass)"
	mConvReflDrop  = "reflection: a forged DNS answer from port 53 to a local port, no request recorded (drop, no_request)"

	convTCPPort = 8080 // the lab's listener, and its established connection's server end
	convUDPPort = 5353 // the lab's bound UDP socket
	convClosed  = 9999 // no socket in the lab
)

var (
	// convRemote is a destination not in the local table: forwarded.
	convRemote = netip.MustParseAddr("203.0.113.9")
	loopback4  = netip.MustParseAddr("127.0.0.1")
	// convLocal is the local table of the micro cases: the lab's loopback
	// (the established connection) and the micro frames' destination.
	convLocal = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.PrefixFrom(microDst4, 32)}
)

// errNotMeasured marks a case this machine cannot run; the report says
// "not measured" and why, not "failed".
var errNotMeasured = errors.New("not measured")

// convLab is a namespace with the sockets the passing cases' packets
// belong to: a listener, an established connection to it over loopback,
// and a bound UDP socket.
type convLab struct {
	ns     *netns.Netns
	client netip.AddrPort // the established connection's client end
}

// newConvLab creates the lab; its sockets close with the micro setup, the
// namespace when the run ends.
func (s *microSetup) newConvLab() (*convLab, error) {
	ns, err := s.e.newNetns()
	if err != nil {
		return nil, err
	}
	lab := &convLab{ns: ns}
	var ln net.Listener
	err = ns.Do(func() error {
		var err error
		if ln, err = net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", convTCPPort)); err != nil {
			return err
		}
		s.closers = append(s.closers, ln.Close)
		udp, err := net.ListenPacket("udp4", fmt.Sprintf(":%d", convUDPPort))
		if err != nil {
			return err
		}
		s.closers = append(s.closers, udp.Close)
		conn, err := net.Dial("tcp4", ln.Addr().String())
		if err != nil {
			return err
		}
		s.closers = append(s.closers, conn.Close)
		lab.client = netip.MustParseAddrPort(conn.LocalAddr().String())
		return nil
	})
	if err != nil {
		return nil, err
	}
	accepted, err := ln.Accept()
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, accepted.Close)
	return lab, nil
}

// inNetns runs fn with the calling thread in ns, then puts the thread back
// in its own namespace. The thread must be locked to its goroutine: the
// micro benchmark's pinned thread is, and setns would otherwise move
// whichever thread the goroutine happens to run on.
func inNetns(ns *netns.Netns, fn func() error) error {
	if ns == nil {
		return fn()
	}
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return err
	}
	defer self.Close()
	target, err := os.Open(ns.Path())
	if err != nil {
		return err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("setns %s: %w", ns, err)
	}
	fnErr := fn()
	if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread cannot be trusted any more: fail the run loudly.
		panic(fmt.Sprintf("setns back from %s: %v", ns, err))
	}
	return fnErr
}

// convACK is a bare TCP ACK, as a flood of made-up connections sends it.
func convACK(src, dst netip.Addr, sport, dport uint16) []byte {
	return pktgen.Frame{Src: src, Dst: dst, Proto: pktgen.ProtoTCP, SrcPort: sport, DstPort: dport,
		TCPFlags: pktgen.TCPAck, TCPSeq: 5, TCPAck: 7}.MustBuild()
}

// dnsAnswer is a DNS answer's first bytes from port 53: a 12-byte header
// whose ID no recorded request carries.
func dnsAnswer(src, dst netip.Addr, dport uint16) []byte {
	return pktgen.UDP4(src, dst, 53, dport, 12)
}

// convLimiter is the setup of a case measuring a limiter with policy, its
// local table set to local.
func (s *microSetup) convLimiter(opts maps.Options, policy string, local []netip.Prefix) func(*microCase) (*ebpf.Program, error) {
	return func(c *microCase) (*ebpf.Program, error) {
		l, err := loadLimiter(opts, policy, nil)
		if err != nil {
			return nil, err
		}
		prog := s.keep(c, l)
		if err := l.SetLocal(local); err != nil {
			return nil, fmt.Errorf("local table: %w", err)
		}
		return prog, nil
	}
}

// addConversations adds the conversation cases; without the lab, each
// case reports why it is missing.
func (s *microSetup) addConversations() {
	lab, labErr := s.newConvLab()
	opts := maps.Options{Clock: maps.ClockCoarse, MaxSources: 1 << 16}
	parser := opts
	parser.BenchParseOnly = true
	check := func(yaml string) string { return "conversations: {" + yaml + "}\nrules: []\n" }
	forgedACK := convACK(microSrc4, microDst4, 40000, convClosed)
	var established []byte
	if lab != nil {
		established = convACK(lab.client.Addr(), loopback4, lab.client.Port(), convTCPPort)
	}
	for _, k := range []struct {
		name, floor, policy string
		frame               []byte
		opts                maps.Options
		want                uint32
		unavailable         error
	}{
		{mConvTCPParser, "", check("tcp: always"), forgedACK, parser, xdpDrop, nil},
		{mConvTCPDrop, mConvTCPParser, check("tcp: always"), forgedACK, opts, xdpDrop, nil},
		{mConvTCPNone, mConvTCPParser, check(""), established, opts, xdpPass, nil},
		{mConvTCPPass, mConvTCPParser, check("tcp: always"), established, opts, xdpPass, nil},
		{mConvCTDrop, mConvTCPParser, check("tcp: {when: always, forwarded: conntrack}"),
			convACK(microSrc4, convRemote, 40000, 80), opts, xdpDrop, maps.ConntrackLookups()},
		{mConvUDPDrop, "", check("udp: always"), pktgen.UDP4(microSrc4, microDst4, 4000, convClosed, 18), opts, xdpDrop, nil},
		{mConvUDPPass, "", check("udp: always"), pktgen.UDP4(microSrc4, microDst4, 4000, convUDPPort, 18), opts, xdpPass, nil},
		{mConvReflDrop, "", check("reflection: always"), dnsAnswer(microSrc4, microDst4, 40000), opts, xdpDrop, nil},
	} {
		c := &microCase{group: convGroup, name: k.name, floor: k.floor, frame: k.frame, want: k.want, warm: 1000}
		if lab != nil {
			c.netns = lab.ns
		}
		setup := s.convLimiter(k.opts, k.policy, convLocal)
		switch {
		case labErr != nil:
			setup = failed(fmt.Errorf("the sockets' namespace: %w", labErr))
		case k.unavailable != nil:
			setup = failed(fmt.Errorf("%w: %v", errNotMeasured, k.unavailable))
		}
		s.add(c, setup)
	}
}

// failed is the setup of a case that cannot be loaded, for err.
func failed(err error) func(*microCase) (*ebpf.Program, error) {
	return func(*microCase) (*ebpf.Program, error) { return nil, err }
}
