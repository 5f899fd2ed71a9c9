// SPDX-License-Identifier: Apache-2.0

package vm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/internal/cpupin"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
)

// The SYN cookie lab's real TCP ends: a server in the listener's namespace
// and a client in its own, both the kernel's TCP through Go's net package.
// A request is one byte and its operands: 'e' and 64 bytes, which the
// server echoes; 'b' and a length, for which it sends its view of the
// connection (tcpView) and then that many bytes. A connection carries
// requests until the client closes it.

// server accepts on the listener's ports and records who connected.
type server struct {
	lns  []net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	from map[netip.Addr]int
	// conns, by the client's address and port (connlog_test.go).
	conns map[netip.AddrPort]*serverConn
}

func startServer(t *testing.T, ns *testutil.Netns, ports ...int) *server {
	t.Helper()
	s := &server{from: map[netip.Addr]int{}}
	err := ns.Do(func() error {
		for _, p := range ports {
			ln, err := net.Listen("tcp4", netip.AddrPortFrom(listenerAddr, uint16(p)).String())
			if err != nil {
				return err
			}
			s.lns = append(s.lns, ln)
		}
		return nil
	})
	t.Cleanup(func() {
		for _, ln := range s.lns {
			ln.Close()
		}
		s.wg.Wait()
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, ln := range s.lns {
		s.wg.Go(func() { s.serve(ln) })
	}
	return s
}

func (s *server) serve(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		ap := c.RemoteAddr().(*net.TCPAddr).AddrPort()
		ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
		s.mu.Lock()
		s.from[ap.Addr()]++
		s.mu.Unlock()
		s.recordAccept(ap)
		s.wg.Go(func() { s.recordEnd(ap, s.handle(c, ap)) })
	}
}

// accepted returns the number of connections accepted, by remote address.
func (s *server) accepted() map[netip.Addr]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[netip.Addr]int, len(s.from))
	for a, n := range s.from {
		out[a] = n
	}
	return out
}

// connDeadline bounds every connection, so that a lost peer cannot hang
// the test; no test waits for it.
const connDeadline = time.Minute

// handle serves c, from the client at from, until it ends: the error
// that ended it (io.EOF when the client closed).
func (s *server) handle(c net.Conn, from netip.AddrPort) error {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(connDeadline))
	for {
		var op [1]byte
		if _, err := io.ReadFull(c, op[:]); err != nil {
			return err
		}
		switch op[0] {
		case 'e':
			var b [64]byte
			if _, err := io.ReadFull(c, b[:]); err != nil {
				return err
			}
			if _, err := c.Write(b[:]); err != nil {
				return err
			}
			s.recordEcho(from)
		case 'b':
			var n [8]byte
			if _, err := io.ReadFull(c, n[:]); err != nil {
				return err
			}
			v, err := tcpViewOf(c)
			if err != nil {
				return err
			}
			if _, err := c.Write([]byte{v.opts, v.snd, v.rcv}); err != nil {
				return err
			}
			// From a thread pinned to one CPU, and the client
			// reads on the other (bulkConn.chunk): where a transfer's
			// softirq work runs follows its threads, and the
			// transfers compared take the same course.
			err = cpupin.OnCPU(0, func() error {
				_, err := io.CopyN(c, zeros{}, int64(binary.BigEndian.Uint64(n[:])))
				return err
			})
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("unknown request %q", op[0])
		}
	}
}

type zeros struct{}

func (zeros) Read(b []byte) (int, error) { clear(b); return len(b), nil }

// tcpView is a socket's view of its connection's options (TCP_INFO):
// TCPI_OPT_* flags, and the window scale it applies to what it sends (the
// peer's) and to what it receives (its own).
type tcpView struct{ opts, snd, rcv uint8 }

// TCP_INFO's tcpi_options bits (include/uapi/linux/tcp.h).
const (
	tcpiOptTimestamps = 1
	tcpiOptSACK       = 2
	tcpiOptWscale     = 4
	tcpiOptECN        = 8
)

func (v tcpView) String() string {
	var o []string
	for _, f := range []struct {
		bit  uint8
		name string
	}{{tcpiOptTimestamps, "timestamps"}, {tcpiOptSACK, "sack"}, {tcpiOptWscale, "wscale"}, {tcpiOptECN, "ecn"}} {
		if v.opts&f.bit != 0 {
			o = append(o, f.name)
		}
	}
	return fmt.Sprintf("[%s] send scale %d, receive scale %d", strings.Join(o, " "), v.snd, v.rcv)
}

func tcpViewOf(c net.Conn) (tcpView, error) {
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		return tcpView{}, err
	}
	var info *unix.TCPInfo
	var ierr error
	if err := raw.Control(func(fd uintptr) {
		info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil {
		return tcpView{}, err
	}
	if ierr != nil {
		return tcpView{}, ierr
	}
	// x/sys's TCPInfo has the byte after tcpi_options as padding; the
	// kernel keeps tcpi_snd_wscale:4 and tcpi_rcv_wscale:4 there.
	scales := (*[8]byte)(unsafe.Pointer(info))[6]
	return tcpView{opts: info.Options, snd: scales & 0xf, rcv: scales >> 4}, nil
}

// dialResult is one connection of the client.
type dialResult struct {
	took time.Duration // until connected, or until the dial failed
	err  error         // the dial's
	exch error         // the exchange's, once connected
	// When the exchange failed: the client's address and port, and its
	// socket's view then (connlog_test.go).
	local netip.AddrPort
	view  string
}

// dialAll opens n connections to port from the client's namespace, workers
// at a time, each with the dial timeout given, and exchanges 64 bytes on
// each. Nothing of the run outlasts until: a dial or an exchange still
// running then fails, and a connection not yet begun is not tried
// (errNotTried), so that a run beside a bounded flood ends inside it.
func (cl *cookieLab) dialAll(n, workers int, port uint16, timeout time.Duration, until time.Time) []dialResult {
	res := make([]dialResult, n)
	jobs := make(chan int, n)
	for i := range n {
		jobs <- i
	}
	close(jobs)
	addr := netip.AddrPortFrom(listenerAddr, port).String()
	var wg sync.WaitGroup
	for range workers {
		// Sockets belong to the namespace of the thread that creates
		// them: each worker dials from a thread in the client's.
		wg.Go(func() {
			_ = cl.C.Do(func() error {
				for i := range jobs {
					if !time.Now().Before(until) {
						res[i] = dialResult{err: errNotTried}
						continue
					}
					res[i] = echoOnce(addr, timeout, until, byte(i))
				}
				return nil
			})
		})
	}
	wg.Wait()
	return res
}

// errNotTried is a connection dialAll had no time left to begin.
var errNotTried = errors.New("not tried: the client's run was out of time")

func echoOnce(addr string, timeout time.Duration, until time.Time, tag byte) dialResult {
	d := net.Dialer{Timeout: timeout, Deadline: until}
	start := time.Now()
	c, err := d.Dial("tcp4", addr)
	r := dialResult{took: time.Since(start), err: err}
	if err != nil {
		return r
	}
	defer c.Close()
	deadline := time.Now().Add(connDeadline)
	cut := until.Before(deadline)
	if cut {
		deadline = until
	}
	_ = c.SetDeadline(deadline)
	msg := append([]byte{'e'}, bytes.Repeat([]byte{tag}, 64)...)
	back := make([]byte, 64)
	if _, err := c.Write(msg); err != nil {
		r.exch = err
	} else if _, err := io.ReadFull(c, back); err != nil {
		r.exch = err
	} else if !bytes.Equal(back, msg[1:]) {
		r.exch = errors.New("the echo differs")
	}
	if r.exch != nil && cut && errors.Is(r.exch, os.ErrDeadlineExceeded) {
		r.exch = errCutShort
	} else if r.exch != nil {
		r.local = c.LocalAddr().(*net.TCPAddr).AddrPort()
		r.view = clientView(c)
	}
	return r
}

// errCutShort is an exchange the client's run ended before its own
// deadline: given less than its time, it neither failed nor completed.
var errCutShort = errors.New("cut short: the client's run ended during the exchange")

// dialStats sums up a client run.
type dialStats struct {
	n, connected, within, exchFailed int
	cut                              int          // exchanges the run's end cut short (errCutShort)
	failed                           []dialResult // the exchanges that failed
	limit                            time.Duration
	median, p99, max                 time.Duration // of every dial, a failed one counting as never
	errs                             map[string]int
}

// echoed is the number of connections whose echo came back.
func (s dialStats) echoed() int { return s.connected - s.exchFailed - s.cut }

const never = time.Duration(1<<63 - 1)

func summarize(res []dialResult, limit time.Duration) dialStats {
	s := dialStats{n: len(res), limit: limit, errs: map[string]int{}}
	var took []time.Duration
	for _, r := range res {
		if r.err != nil {
			s.errs[shortErr(r.err)]++
			took = append(took, never)
			continue
		}
		s.connected++
		took = append(took, r.took)
		if r.took <= limit {
			s.within++
		}
		if errors.Is(r.exch, errCutShort) {
			s.cut++
			s.errs["exchange: "+r.exch.Error()]++
		} else if r.exch != nil {
			s.exchFailed++
			s.failed = append(s.failed, r)
			s.errs["exchange: "+shortErr(r.exch)]++
		}
	}
	if len(took) == 0 {
		return s
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	s.median, s.p99, s.max = took[len(took)/2], took[(len(took)*99+99)/100-1], took[len(took)-1]
	return s
}

// shortErr drops the addresses from an error, so that failures group.
func shortErr(err error) string {
	var op *net.OpError
	if errors.As(err, &op) {
		return op.Op + ": " + op.Err.Error()
	}
	return err.Error()
}

func fmtDial(d time.Duration) string {
	if d == never {
		return "never"
	}
	return d.Round(100 * time.Microsecond).String()
}

func (s dialStats) String() string {
	var errs []string
	for e, n := range s.errs {
		errs = append(errs, fmt.Sprintf("%d× %s", n, e))
	}
	slices.Sort(errs)
	out := fmt.Sprintf("%d of %d connected within %v (%.1f%%), %d at all; dial median %s, p99 %s, max %s; %d exchanges failed",
		s.within, s.n, s.limit, 100*float64(s.within)/float64(max(s.n, 1)), s.connected,
		fmtDial(s.median), fmtDial(s.p99), fmtDial(s.max), s.exchFailed)
	if len(errs) > 0 {
		out += "; errors: " + strings.Join(errs, ", ")
	}
	return out
}

// sample is a quantity measured over interleaved runs.
type sample []float64

func (s sample) median() float64 { return s.quantile(0.5) }

// quantile interpolates between the nearest ranks.
func (s sample) quantile(q float64) float64 {
	if len(s) == 0 {
		return 0
	}
	c := slices.Clone(s)
	slices.Sort(c)
	x := q * float64(len(c)-1)
	i := int(x)
	if i+1 >= len(c) {
		return c[len(c)-1]
	}
	return c[i] + (x-float64(i))*(c[i+1]-c[i])
}
