// SPDX-License-Identifier: Apache-2.0

package testutil

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// DelayProxy forwards TCP connections to a target, holding every chunk of
// data for a delay in each direction: a slow link for tests, since this
// kernel has no netem. Both its listening and its dialing sockets live in
// one namespace. The delay can change while connections are open; a chunk
// keeps the delay in force when it was read, so order is kept.
type DelayProxy struct {
	ln     net.Listener
	ns     *Netns
	target string
	delay  atomic.Int64 // time.Duration

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	stop   chan struct{} // closed by close: held chunks are dropped
	wg     sync.WaitGroup
}

// StartDelayProxy listens on listen ("ip:port") in ns and forwards to
// target. It stops in tb.Cleanup, closing every connection.
func StartDelayProxy(tb testing.TB, ns *Netns, listen, target string, delay time.Duration) *DelayProxy {
	tb.Helper()
	p := &DelayProxy{ns: ns, target: target, conns: map[net.Conn]struct{}{}, stop: make(chan struct{})}
	p.delay.Store(int64(delay))
	err := ns.Do(func() error {
		var err error
		p.ln, err = net.Listen("tcp", listen)
		return err
	})
	if err != nil {
		tb.Fatalf("delay proxy on %s in %s: %v", listen, ns, err)
	}
	tb.Cleanup(p.close)
	p.wg.Add(1)
	go p.accept()
	return p
}

// Addr is where clients connect instead of the target.
func (p *DelayProxy) Addr() string { return p.ln.Addr().String() }

// SetDelay changes the one-way delay for data read from now on.
func (p *DelayProxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// track registers a connection, or closes it if the proxy is closing.
func (p *DelayProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

// untrack closes a connection and forgets it.
func (p *DelayProxy) untrack(c net.Conn) {
	c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func (p *DelayProxy) accept() {
	defer p.wg.Done()
	dial := DialIn(p.ns)
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		if !p.track(client) {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.untrack(client)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			server, err := dial(ctx, "tcp", p.target)
			cancel()
			if err != nil || !p.track(server) {
				return
			}
			defer p.untrack(server)
			var both sync.WaitGroup
			both.Add(2)
			go func() { defer both.Done(); p.pipe(server, client) }()
			go func() { defer both.Done(); p.pipe(client, server) }()
			both.Wait()
		}()
	}
}

type chunk struct {
	data []byte
	due  time.Time
}

// pipe copies src to dst, each chunk no earlier than its due time. A reader
// and a writer run apart so that reading (and timestamping) goes on while
// the writer waits.
func (p *DelayProxy) pipe(dst, src net.Conn) {
	queue := make(chan chunk, 4096)
	go func() {
		defer close(queue)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				queue <- chunk{buf[:n], time.Now().Add(time.Duration(p.delay.Load()))}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range queue {
		select {
		case <-time.After(time.Until(c.due)):
		case <-p.stop:
		}
		if _, err := dst.Write(c.data); err != nil {
			src.Close() // unblocks the reader, which closes the queue
			for range queue {
			}
			return
		}
	}
	// The source said EOF: pass it on, so request-then-close works.
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}

func (p *DelayProxy) close() {
	p.mu.Lock()
	p.closed = true
	close(p.stop)
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}
