// SPDX-License-Identifier: Apache-2.0

package vm

import (
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"
)

// What both ends saw of a connection whose exchange failed: the client's
// socket (TCP_INFO, read when the exchange gave up) and the server's record
// of the connections it accepted from the client's address and port. Which
// end stopped (the client's data never acknowledged, or acknowledged and
// never echoed, or the server's copy ended) says where to look.

// serverConn is the server's record of the connections from one address
// and port: how many it accepted, the echoes it sent, and how the last
// ended.
type serverConn struct {
	accepted, echoed int
	end              string
}

// recordAccept and recordEnd keep s.conns; the caller holds no lock.
func (s *server) recordAccept(from netip.AddrPort) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns == nil {
		s.conns = map[netip.AddrPort]*serverConn{}
	}
	c := s.conns[from]
	if c == nil {
		c = &serverConn{}
		s.conns[from] = c
	}
	c.accepted++
}

func (s *server) recordEcho(from netip.AddrPort) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.conns[from]; c != nil {
		c.echoed++
	}
}

func (s *server) recordEnd(from netip.AddrPort, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.conns[from]; c != nil {
		c.end = shortErr(err)
	}
}

// connOf describes what the server saw of connections from a.
func (s *server) connOf(a netip.AddrPort) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.conns[a]
	if c == nil {
		return "the listener accepted no connection from it"
	}
	return fmt.Sprintf("the listener accepted %d from it, echoed %d times, and its last ended with %q",
		c.accepted, c.echoed, c.end)
}

// clientView describes a client socket's connection from TCP_INFO.
func clientView(c net.Conn) string {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return "not TCP"
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return err.Error()
	}
	var info *unix.TCPInfo
	var ierr error
	if err := raw.Control(func(fd uintptr) {
		info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil {
		return err.Error()
	}
	if ierr != nil {
		return ierr.Error()
	}
	return fmt.Sprintf("state %d, %d segments unacknowledged, %d sent again (%d in all), rto %d ms, last data sent %d ms and received %d ms ago, last ACK %d ms ago",
		info.State, info.Unacked, info.Retransmits, info.Total_retrans, info.Rto/1000,
		info.Last_data_sent, info.Last_data_recv, info.Last_ack_recv)
}
