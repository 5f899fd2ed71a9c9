// SPDX-License-Identifier: Apache-2.0

package vm

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/metrics"
	"github.com/xdplimit/xdplimit/pktgen"
)

// The lab's additions for the reject tests: the sender's end made to take
// the answers in, the clients' sockets, and the source report's client.

// senderSink attaches an XDP program to the sender's end: the answers the
// limiter sends back with XDP_TX reach the sender's stack only through a
// veth end that has one (with a plain peer, the kernel counts them as
// xdp_tx_errors and drops them). mode SinkCount
// also counts them by source address.
func (l *lab) senderSink(t *testing.T, mode pktgen.SinkMode) *pktgen.Sink {
	t.Helper()
	s, err := pktgen.AttachSink(l.NS.Path(), l.Name, mode)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// addAddr gives the sender's end one more address.
func (l *lab) addAddr(t *testing.T, p string) netip.Addr {
	t.Helper()
	pfx := netip.MustParsePrefix(p)
	err := l.NS.Do(func() error {
		link, err := netlink.LinkByName(l.Name)
		if err != nil {
			return err
		}
		a := &netlink.Addr{IPNet: &net.IPNet{IP: pfx.Addr().AsSlice(), Mask: net.CIDRMask(pfx.Bits(), pfx.Addr().BitLen())}}
		if pfx.Addr().Is6() {
			a.Flags = unix.IFA_F_NODAD
		}
		return netlink.AddrAdd(link, a)
	})
	if err != nil {
		t.Fatal(err)
	}
	return pfx.Addr()
}

// anyIP makes the sender's stack take 10.0.0.0/8 as its own (an AnyIP
// route): the answers to the flood's forged sources then reach its TCP,
// which checks their checksums and counts those that fail.
func (l *lab) anyIP(t *testing.T) {
	t.Helper()
	err := l.NS.Do(func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.RouteAdd(&netlink.Route{LinkIndex: lo.Attrs().Index, Dst: &net.IPNet{IP: net.IPv4(10, 0, 0, 0),
			Mask: net.CIDRMask(8, 32)}, Type: unix.RTN_LOCAL, Table: unix.RT_TABLE_LOCAL, Scope: unix.RT_SCOPE_HOST})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// dialFrom opens a socket in the sender's namespace from from to to:port;
// a refused connect fails at once, a dropped one would time out after 20 s.
func (l *lab) dialFrom(network string, from, to netip.Addr, port uint16) (net.Conn, error) {
	var c net.Conn
	err := l.NS.Do(func() (err error) {
		var local net.Addr = &net.TCPAddr{IP: from.AsSlice()}
		if network == "udp" {
			local = &net.UDPAddr{IP: from.AsSlice()}
		}
		d := net.Dialer{LocalAddr: local, Timeout: 20 * time.Second}
		c, err = d.Dial(network, netip.AddrPortFrom(to, port).String())
		return err
	})
	return c, err
}

// rejectListeners listens on TCP port 8080 and UDP port 5353 in the
// receiver's namespace, taking whatever comes, until the test ends.
func (l *lab) rejectListeners(t *testing.T) {
	var tcpLn net.Listener
	var udpLn net.PacketConn
	err := l.PeerNS.Do(func() (err error) {
		if tcpLn, err = net.Listen("tcp", "[::]:8080"); err != nil {
			return err
		}
		udpLn, err = net.ListenPacket("udp", "[::]:5353")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tcpLn.Close(); udpLn.Close() })
	go func() {
		for {
			c, err := tcpLn.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := udpLn.ReadFrom(buf); err != nil {
				return
			}
		}
	}()
}

// synFrom is a SYN to the receiver's port 8080 from src.
func (l *lab) synFrom(src string) []byte {
	return pktgen.Frame{SrcMAC: l.MAC, DstMAC: l.PeerMAC, Src: netip.MustParseAddr(src), Dst: l.PeerAddr,
		Proto: pktgen.ProtoTCP, SrcPort: 40000, DstPort: 8080, TCPFlags: pktgen.TCPSyn}.MustBuild()
}

// settledAnswers waits until the sink has counted every answer in flight
// (its count still for 100 ms) and returns the answers from from.
func settledAnswers(t *testing.T, sink *pktgen.Sink, from netip.Addr) uint64 {
	t.Helper()
	answers := func() uint64 {
		t.Helper()
		src, err := sink.Sources()
		if err != nil {
			t.Fatal(err)
		}
		return src[from]
	}
	n := answers()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		if m := answers(); m != n {
			n = m
			continue
		}
		return n
	}
	t.Fatal("answers still arriving 5 s after the flood")
	return 0
}

// sourcesClient asks the receiver's metrics address what the limiter
// holds for a source.
type sourcesClient struct {
	*http.Client
	url string
}

func (l *lab) sourcesClient(addr string) sourcesClient {
	return sourcesClient{url: "http://" + addr + "/v1/sources/", Client: &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (c net.Conn, err error) {
			err = l.PeerNS.Do(func() error {
				c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		}}}}
}

// get is the report on addr, and how long it took.
func (c sourcesClient) get(t *testing.T, addr netip.Addr) (metrics.Sources, time.Duration) {
	t.Helper()
	start := time.Now()
	resp, err := c.Get(c.url + addr.String())
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	var s metrics.Sources
	if err == nil {
		err = json.Unmarshal(body, &s)
	}
	if err != nil || resp.StatusCode != http.StatusOK || len(s.Interfaces) != 1 || s.Interfaces[0].Error != "" {
		t.Fatalf("/v1/sources/%v: %s %v\n%s", addr, resp.Status, err, body)
	}
	return s, took
}
