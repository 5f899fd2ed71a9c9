// SPDX-License-Identifier: Apache-2.0

package vm

// The lab's DNS client: stub-resolver lookups at a steady rate from
// several sockets, each counted answered, bad or lost.

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/gopacket/gopacket/layers"
)

// dnsQuery is a query for name's address, recursion desired, as a stub
// resolver sends it.
func dnsQuery(id uint16, name string) []byte {
	b := binary.BigEndian.AppendUint16(nil, id)
	b = append(b, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0)
	for _, label := range strings.Split(name, ".") {
		b = append(append(b, byte(len(label))), label...)
	}
	return append(b, 0, 0, byte(layers.DNSTypeA), 0, byte(layers.DNSClassIN))
}

// dnsAnswered: an answer with no error and at least one record.
func dnsAnswered(b []byte) bool {
	return len(b) >= 12 && b[2]&0x80 != 0 && b[3]&0x0f == 0 && binary.BigEndian.Uint16(b[6:]) > 0
}

// probeDNS asks the resolver once, waiting 200 ms for its answer.
func (l *lab) probeDNS(at netip.AddrPort) bool {
	c, err := l.NS.DialContext(context.Background(), "udp4", at.String())
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(200 * time.Millisecond))
	buf := make([]byte, 512)
	_, err = c.Write(dnsQuery(1, labNames[0]))
	n, rerr := c.Read(buf)
	return err == nil && rerr == nil && dnsAnswered(buf[:n])
}

// The lookups go out of 16 sockets, 16 source ports, as a host's stub
// resolvers (glibc's takes a new port per lookup) spread theirs.
func openDNSSockets(l *lab) ([]*net.UDPConn, error) {
	var socks []*net.UDPConn
	err := l.NS.Do(func() error {
		for range 16 {
			c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: l.Addr.AsSlice()})
			if err != nil {
				return err
			}
			socks = append(socks, c)
		}
		return nil
	})
	if err != nil {
		for _, c := range socks {
			c.Close()
		}
	}
	return socks, err
}

// runDNS sends lookups at the configured rate until ctx ends, then waits
// out the last ones' timeout. pending holds each one's send time by
// socket and query ID.
func (rt *realTraffic) runDNS(ctx context.Context, socks []*net.UDPConn, at netip.AddrPort) {
	pending := map[uint32]time.Time{}
	var readers sync.WaitGroup
	for i, c := range socks {
		readers.Go(func() {
			buf := make([]byte, 1500)
			for {
				n, from, err := c.ReadFromUDPAddrPort(buf)
				if errors.Is(err, net.ErrClosed) {
					return
				}
				if err != nil || n < 12 || from != at {
					continue
				}
				key := uint32(i)<<16 | uint32(binary.BigEndian.Uint16(buf))
				rt.count(func(tc *trafficCounts) {
					sent, ok := pending[key]
					delete(pending, key)
					switch {
					case !ok || time.Since(sent) > rt.cfg.DNSTimeout:
						tc.DNS.Late++ // counted lost by expire, or about to be
						if ok {
							tc.DNS.Lost++
						}
					case dnsAnswered(buf[:n]):
						tc.DNS.Answered++
					default:
						tc.DNS.Bad++
					}
				})
			}
		})
	}
	expire := func() int {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		for k, sent := range pending {
			if time.Since(sent) > rt.cfg.DNSTimeout {
				delete(pending, k)
				rt.c.DNS.Lost++
			}
		}
		return len(pending)
	}
	tick := time.NewTicker(time.Second / time.Duration(rt.cfg.DNSRate))
	defer tick.Stop()
	for n := 0; ctx.Err() == nil; n++ {
		i, id := n%len(socks), uint16(rand.Uint32())
		key := uint32(i)<<16 | uint32(id)
		rt.count(func(tc *trafficCounts) {
			if _, dup := pending[key]; !dup {
				pending[key] = time.Now()
				tc.DNS.Sent++
			}
		})
		if _, err := socks[i].WriteToUDPAddrPort(dnsQuery(id, labNames[n%len(labNames)]), at); err != nil {
			rt.count(func(tc *trafficCounts) {
				if _, ok := pending[key]; ok { // lost at once
					delete(pending, key)
					tc.DNS.Lost++
				}
			})
		}
		expire()
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	for expire() > 0 {
		time.Sleep(20 * time.Millisecond)
	}
	for _, c := range socks {
		c.Close()
	}
	readers.Wait()
}
