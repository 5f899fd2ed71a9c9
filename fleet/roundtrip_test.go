// SPDX-License-Identifier: Apache-2.0

package fleet_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/fleet"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/maps"
)

// link watches the connections a dialer opens: it counts the writes (each
// a request the client sends, then waits for), and may hold every read
// back for a delay (a slow link's replies), noting when each was
// delivered.
type link struct {
	writes    atomic.Int64
	delay     atomic.Int64 // time.Duration
	mu        sync.Mutex
	delivered []time.Time
}

type linkConn struct {
	net.Conn
	l *link
}

func (c linkConn) Write(b []byte) (int, error) {
	c.l.writes.Add(1)
	return c.Conn.Write(b)
}

func (c linkConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	time.Sleep(time.Duration(c.l.delay.Load()))
	c.l.mu.Lock()
	c.l.delivered = append(c.l.delivered, time.Now())
	c.l.mu.Unlock()
	return n, err
}

// firstReply is when the first reply after start was delivered.
func (l *link) firstReply(start time.Time) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, d := range l.delivered {
		if d.After(start) {
			return d
		}
	}
	return time.Time{}
}

func (l *link) dial(dial func(context.Context, string, string) (net.Conn, error)) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return linkConn{c, l}, nil
	}
}

// A sync is one round trip to Redis, bans and all, as docs/fleet.md has
// it: the read of the fleet's ban hash goes in the exchange's pipeline.
// Sent after the exchange, it made every sync two round trips, and over a
// 200 ms link syncs of 20 keys took 0.5 s idle and over a second on a
// loaded machine, some past their deadline.
func TestSyncIsOneRoundTrip(t *testing.T) {
	r, ns := startRedis(t)
	var l link
	f, _ := newHosts(t, l.dial(testutil.DialIn(ns)), 1, fmt.Sprintf(`
fleet:
  redis: redis://%s/0
  namespace: rt%d
  sync: 100ms
rules:
  - name: dns
    match: {protocol: udp, dst_ports: [53]}
    limit: {algorithm: token_bucket, rate: 1000/s, burst: 200, scope: fleet}
  - name: ssh
    match: {protocol: tcp, dst_ports: [22]}
    limit: {algorithm: fixed_window, packets: 2, window: 10s}
    action: ban
    ban: {for: 1m}
`, r.Addr(), time.Now().UnixNano()))
	ctx := context.Background()
	// The first syncs connect and load the scripts (NOSCRIPT, then their
	// text): more round trips, once.
	for range 2 {
		if err := f.SyncAll(ctx); err != nil {
			t.Fatal(err)
		}
		f.Advance(100 * time.Millisecond)
	}
	const syncs = 5
	n0 := l.writes.Load()
	for range syncs {
		if err := f.SyncAll(ctx); err != nil {
			t.Fatal(err)
		}
		f.Advance(100 * time.Millisecond)
	}
	if n := l.writes.Load() - n0; n != syncs {
		t.Errorf("%d syncs sent %d requests, want one each", syncs, n)
	}
}

// tableWatch is a datapath whose ban table reads are counted and timed.
type tableWatch struct {
	*maps.Limiter
	mu    sync.Mutex
	reads []time.Time // when each read of the table began
}

func (w *tableWatch) Bans() ([]maps.Ban, error) {
	w.mu.Lock()
	w.reads = append(w.reads, time.Now())
	w.mu.Unlock()
	return w.Limiter.Bans()
}

func (w *tableWatch) began() []time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]time.Time(nil), w.reads...)
}

// The ban table is read whole (every slot copied: 24-60 ms for 65536 slots
// here, over 100 ms in a busy attach process), so a sync reads it while
// its exchange is on the wire, not after the reply; and not at all while
// no ban is in force on the host (no ban rule, none applied). After the
// reply, the read made every sync over a slow link longer by that much,
// and every sync at 100 ms took 150 ms of a CPU even with no ban at all.
func TestSyncReadsBanTableDuringExchange(t *testing.T) {
	r, ns := startRedis(t)
	for _, c := range []struct {
		name, rule string
		reads      bool
	}{
		{"no ban rule", "", false},
		{"a ban rule", "\n    action: ban\n    ban: {for: 1m}", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := fmt.Sprintf("fleet: {redis: 'redis://%s/0', namespace: pf%d, sync: 100ms}\nrules:\n"+
				"  - name: r\n    limit: {algorithm: token_bucket, rate: 10/s, burst: 5, scope: fleet}%s\n",
				r.Addr(), time.Now().UnixNano(), c.rule)
			img, p := xdpltest.CompilePolicy(t, src)
			w := &tableWatch{Limiter: xdpltest.LoadImage(t, maps.Options{Clock: maps.ClockKtime, MaxSources: 1 << 10}, img)}
			var l link
			e, err := fleet.New(fleet.Options{Fleet: p.Fleet, Interface: "t", Dialer: l.dial(testutil.DialIn(ns))}, w)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			ctx := context.Background()
			if res := e.Sync(ctx); res.Err != nil { // connects, loads the scripts
				t.Fatal(res.Err)
			}
			// Replies 300 ms late: the exchange is on the wire that long.
			l.delay.Store(int64(300 * time.Millisecond))
			n0 := len(w.began())
			for range 3 {
				start := time.Now()
				if res := e.Sync(ctx); res.Err != nil {
					t.Fatal(res.Err)
				}
				reads := w.began()[n0:]
				n0 += len(reads)
				switch {
				case !c.reads && len(reads) != 0:
					t.Fatalf("a sync read the ban table %d times with no ban in force", len(reads))
				case c.reads && len(reads) != 1:
					t.Fatalf("a sync read the ban table %d times, want once", len(reads))
				case c.reads && !reads[0].Before(l.firstReply(start)):
					t.Errorf("the table read began %v into the sync, after the exchange's reply (%v)",
						reads[0].Sub(start), l.firstReply(start).Sub(start))
				}
			}
		})
	}
}
