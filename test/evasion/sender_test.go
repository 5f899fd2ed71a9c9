// SPDX-License-Identifier: Apache-2.0

package evasion

import (
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
)

// sender writes raw frames out of the sending end of a veth, at most
// maxRate frames per second.
type sender struct {
	fd   int
	addr unix.SockaddrLinklayer
	last time.Time
	n    int
}

const maxRate = 50_000

func openSender(t *testing.T, v *testutil.Veth) *sender {
	s := &sender{addr: unix.SockaddrLinklayer{Ifindex: v.Index, Halen: 6}}
	copy(s.addr.Addr[:], v.PeerMAC)
	err := v.NS.Do(func() error {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
		if err != nil {
			return err
		}
		s.fd = fd
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(s.fd) })
	s.last = time.Now()
	return s
}

// send writes the frames and returns how many; frames the device refuses
// (too short for Ethernet, or longer than its MTU allows: a hundred VLAN
// tags before an IPv6 header and its extension headers can be) are
// skipped: they cannot reach the stack either.
func (s *sender) send(t *testing.T, frames ...[]byte) int {
	sent := 0
	for _, f := range frames {
		if len(f) < 14 {
			continue
		}
		if err := unix.Sendto(s.fd, f, 0, &s.addr); err != nil {
			if err == unix.ENOBUFS {
				time.Sleep(time.Millisecond)
				continue
			}
			if err == unix.EMSGSIZE {
				continue
			}
			t.Fatalf("send %x: %v", f, err)
		}
		sent++
		s.n++
		if s.n%256 == 0 {
			if d := time.Duration(256*float64(time.Second)/maxRate) - time.Since(s.last); d > 0 {
				time.Sleep(d)
			}
			s.last = time.Now()
		}
	}
	return sent
}

func netIP(s string) net.IP { return net.ParseIP(s) }
