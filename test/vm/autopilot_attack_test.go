// SPDX-License-Identifier: Apache-2.0

package vm

// The floods of the autopilot's lab: pools of frames of each shape, sent
// raw out of the client's end at a paced rate, bounded by count and time.

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/pktgen"
)

// attackEnds is where a flood's frames go: l's receiving end, from its
// sending end's MAC.
type attackEnds struct {
	SrcMAC, DstMAC net.HardwareAddr
	Dst            netip.Addr
}

func (l *lab) attackEnds() attackEnds {
	return attackEnds{SrcMAC: l.MAC, DstMAC: l.PeerMAC, Dst: l.PeerAddr}
}

// attackShape is a flood the autopilot must tell from the real traffic to
// the same destination: build makes a pool of n distinct frames from seed.
type attackShape struct {
	name  string
	proto layers.IPProtocol
	port  uint16
	build func(e attackEnds, seed uint64, n int) [][]byte
}

var attackShapes = []attackShape{
	{"udpPrefixFlood", layers.IPProtocolUDP, prefixFloodPort, udpPrefixFlood},
	{"tcpWindowFlood", layers.IPProtocolTCP, labHTTPPort, tcpWindowFlood},
	{"ttlLenFlood", layers.IPProtocolUDP, 53, ttlLenFlood},
	{"dnsQueryFlood", layers.IPProtocolUDP, 53, dnsQueryFlood},
	{"randomFlood", layers.IPProtocolUDP, 53, randomFlood},
}

// attackPool builds n frames, each from a random source in attackNet and
// port, shaped by shape. Every frame gets a random IP ID: pktgen writes
// 0, a value no shape means to share (the real lookups' is 0 too, DF set).
func attackPool(e attackEnds, seed uint64, n int, shape func(rng *rand.Rand, f *pktgen.Frame)) [][]byte {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	pool := make([][]byte, n)
	base := binary.BigEndian.Uint32(attackNet.Addr().AsSlice())
	for i := range pool {
		src := binary.BigEndian.AppendUint32(nil, base|rng.Uint32N(1<<(32-attackNet.Bits())))
		f := pktgen.Frame{SrcMAC: e.SrcMAC, DstMAC: e.DstMAC, Src: netip.AddrFrom4([4]byte(src)), Dst: e.Dst,
			SrcPort: uint16(1 + rng.IntN(65535))}
		shape(rng, &f)
		b := f.MustBuild()
		binary.BigEndian.PutUint16(b[14+4:], uint16(rng.Uint32()))
		pktgen.FixIPv4Checksum(b)
		pool[i] = b
	}
	return pool
}

func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// udpPayload sets a UDP frame's payload to make its IP length ipLen.
func udpPayload(rng *rand.Rand, f *pktgen.Frame, ipLen int) { f.Data = randomBytes(rng, ipLen-20-8) }

// udpPrefixFlood: 64 bytes that start with attackPrefix.
func udpPrefixFlood(e attackEnds, seed uint64, n int) [][]byte {
	return attackPool(e, seed, n, func(rng *rand.Rand, f *pktgen.Frame) {
		f.DstPort, f.Data = prefixFloodPort, append([]byte(attackPrefix), randomBytes(rng, 64-len(attackPrefix))...)
	})
}

// tcpWindowFlood: SYNs with window 1024 and an MSS option only (Linux
// offers MSS, SACK, timestamps, NOP, window scale, window 64240).
func tcpWindowFlood(e attackEnds, seed uint64, n int) [][]byte {
	pool := attackPool(e, seed, n, func(rng *rand.Rand, f *pktgen.Frame) {
		f.Proto, f.DstPort, f.TTL, f.TCPSeq = pktgen.ProtoTCP, labHTTPPort, 64, rng.Uint32()
		f.TCPOptions = []pktgen.TCPOption{pktgen.OptMSS(1460)}
	})
	for _, b := range pool {
		// pktgen writes window 65535; the checksum covers the window.
		binary.BigEndian.PutUint16(b[14+20+14:], 1024)
		setL4Checksum(b)
	}
	return pool
}

// ttlLenFlood: TTL drawn from 50..60 and IP length from 1200..1210.
func ttlLenFlood(e attackEnds, seed uint64, n int) [][]byte {
	return attackPool(e, seed, n, func(rng *rand.Rand, f *pktgen.Frame) {
		f.DstPort, f.TTL = 53, uint8(50+rng.IntN(11))
		udpPayload(rng, f, 1200+rng.IntN(11))
	})
}

// dnsQueryFlood: well-formed queries for one name (a random ID each).
func dnsQueryFlood(e attackEnds, seed uint64, n int) [][]byte {
	return attackPool(e, seed, n, func(rng *rand.Rand, f *pktgen.Frame) {
		f.DstPort, f.Data = 53, dnsQuery(uint16(rng.Uint32()), attackName)
	})
}

// randomFlood shares no trait the real lookups lack: TTL 1..255, IP
// length 100..1400, random payload, DSCP 0 as real clients send.
func randomFlood(e attackEnds, seed uint64, n int) [][]byte {
	return attackPool(e, seed, n, func(rng *rand.Rand, f *pktgen.Frame) {
		f.DstPort, f.TTL = 53, uint8(1+rng.IntN(255))
		udpPayload(rng, f, 100+rng.IntN(1301))
	})
}

// l4Sum is the Internet checksum of an untagged IPv4 frame's TCP or UDP
// segment with its pseudo header: 0 when the checksum in it is right.
func l4Sum(b []byte) uint16 {
	ip := b[14:]
	seg := ip[int(ip[0]&0xf)*4 : binary.BigEndian.Uint16(ip[2:])]
	sum := uint32(ip[9]) + uint32(len(seg))
	for i := 12; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	return pktgen.Checksum(sum, seg)
}

// setL4Checksum rewrites a TCP or UDP frame's checksum after a change.
func setL4Checksum(b []byte) {
	at := 14 + int(b[14]&0xf)*4 + map[byte]int{6: 16, 17: 6}[b[14+9]]
	b[at], b[at+1] = 0, 0
	binary.BigEndian.PutUint16(b[at:], l4Sum(b))
}

// attackRun is a flood sending in the background.
type attackRun struct {
	cancel context.CancelFunc
	done   chan struct{}
	sent   atomic.Uint64
	err    error
}

// startAttack writes pool's frames, cycled, out of l's sending end at
// rate frames a second until count are sent or timeout passes (the test's
// cleanup stops it earlier). Each millisecond it sends what the rate owes
// since the start, at most 10 ms' worth: after a stall (the CPU taken by
// a server) the flood resumes at its rate, not in one burst.
func (l *lab) startAttack(t *testing.T, pool [][]byte, rate int, count uint64, timeout time.Duration) *attackRun {
	t.Helper()
	var fd int
	err := l.NS.Do(func() (err error) {
		// Protocol 0: the socket sends and receives nothing.
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		return err
	})
	if err != nil {
		t.Fatalf("attack socket: %v", err)
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1)
	to := &unix.SockaddrLinklayer{Ifindex: l.Index, Halen: 6}
	copy(to.Addr[:], l.PeerMAC)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	a := &attackRun{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(a.done)
		defer unix.Close(fd)
		start, burst := time.Now(), uint64(max(rate/100, 1))
		for i := uint64(0); i < count && ctx.Err() == nil; time.Sleep(time.Millisecond) {
			due := min(uint64(time.Since(start).Seconds()*float64(rate))+1, count, i+burst)
			for ; i < due; i++ {
				if err := unix.Sendto(fd, pool[i%uint64(len(pool))], 0, to); errors.Is(err, unix.ENOBUFS) {
					break // the device is full: a millisecond's rest
				} else if err != nil {
					a.err = err
					return
				}
				a.sent.Add(1)
			}
		}
	}()
	t.Cleanup(func() { a.Stop() })
	return a
}

// Sent is how many frames went out so far.
func (a *attackRun) Sent() uint64 { return a.sent.Load() }

// Done says whether the flood has ended.
func (a *attackRun) Done() bool { return closed(a.done) }

// Wait waits until the flood has sent its count or met its timeout.
func (a *attackRun) Wait() (uint64, error) {
	<-a.done
	return a.Sent(), a.err
}

// Stop ends the flood and returns what it sent.
func (a *attackRun) Stop() (uint64, error) {
	a.cancel()
	return a.Wait()
}
