// SPDX-License-Identifier: Apache-2.0

// Package fleet holds the end-to-end tests of fleet-wide limits, run in
// internal/testkit/fleetlab's Lab. TestLab proves the lab
// itself: every host reaches Redis (single and cluster) through its own
// link, faults can be injected per host or per server, floods reach the
// host they are aimed at, and nothing outlives the test.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/xdplimit/xdplimit/internal/testkit/fleetlab"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
)

func TestLab(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireRedis(t)
	var namespaces []string
	newLab := func(t *testing.T) *fleetlab.Lab {
		l := fleetlab.NewLab(t, 3)
		for _, ns := range l.Namespaces() {
			namespaces = append(namespaces, ns.Name())
		}
		return l
	}

	t.Run("single", func(t *testing.T) { testSingle(t, newLab(t)) })
	t.Run("cluster", func(t *testing.T) { testCluster(t, newLab(t)) })
	t.Run("flood", func(t *testing.T) {
		l := newLab(t)
		t.Run("one host", func(t *testing.T) { testFlood(t, l) })
		t.Run("every host at once", func(t *testing.T) { testConcurrentFloods(t, l) })
	})

	// The subtests' cleanups have run: their namespaces and servers must
	// be gone, whatever the subtests did.
	t.Run("nothing left", func(t *testing.T) {
		if len(namespaces) == 0 {
			t.Skip("skipping: no lab was built (the subtests said why)")
		}
		for _, name := range namespaces {
			if _, err := os.Stat(filepath.Join(testutil.NetnsDir, name)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("namespace %s outlived its test (%v)", name, err)
			}
		}
		// Nor any other namespace this process made.
		prefix := fmt.Sprintf("%s%d-", testutil.NetnsPrefix, os.Getpid())
		entries, err := os.ReadDir(testutil.NetnsDir)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), prefix) {
				t.Errorf("namespace %s outlived its test", e.Name())
			}
		}
		pids, err := testutil.RedisChildren()
		if err != nil {
			t.Fatal(err)
		}
		if len(pids) > 0 {
			t.Errorf("redis-server children outlived their test: %v", pids)
		}
	})
}

// within runs a call with a deadline and returns its error and duration.
func within(d time.Duration, call func(ctx context.Context) error) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	err := call(ctx)
	return time.Since(start), err
}

// eventually retries call until it succeeds or d has passed.
func eventually(t *testing.T, what string, d time.Duration, call func(ctx context.Context) error) {
	t.Helper()
	var err error
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, err = within(time.Second, call); err == nil {
			return
		}
	}
	t.Fatalf("%s: still failing after %v: %v", what, d, err)
}

// mustFail checks that call fails once its deadline (limit) has passed, if
// not sooner, and returns promptly then: a fault must show as an error in
// bounded time, never as a hang. The fleet sync bounds its calls the same
// way, with a context deadline.
func mustFail(t *testing.T, what string, limit time.Duration, call func(ctx context.Context) error) {
	t.Helper()
	took, err := within(limit, call)
	if err == nil {
		t.Fatalf("%s: call succeeded", what)
	}
	if slack := 500 * time.Millisecond; took > limit+slack {
		t.Fatalf("%s: failed only after %v (deadline %v): %v", what, took, limit, err)
	}
	t.Logf("%s: failed after %v: %v", what, took.Round(time.Millisecond), err)
}

func ping(c redis.UniversalClient) func(ctx context.Context) error {
	return func(ctx context.Context) error { return c.Ping(ctx).Err() }
}

// testPartition cuts host 1 off from Redis: its calls fail within their
// deadline while hosts 0 and 2 go on working; after Heal host 1 recovers.
// call(i) is a Redis call made from host i.
func testPartition(t *testing.T, l *fleetlab.Lab, call func(i int) func(context.Context) error) {
	l.Partition(t, 1)
	mustFail(t, "partitioned host 1", 2*time.Second, call(1))
	for _, i := range []int{0, 2} {
		if _, err := within(time.Second, call(i)); err != nil {
			t.Fatalf("host %d during host 1's partition: %v", i, err)
		}
	}
	l.Heal(t, 1)
	eventually(t, "host 1 after Heal", 10*time.Second, call(1))
}

func testSingle(t *testing.T, l *fleetlab.Lab) {
	const password = "lab-secret"
	srv := l.StartRedis(t, password)
	if srv.Addr() != l.RedisAddr() {
		t.Fatalf("server at %s, lab says %s", srv.Addr(), l.RedisAddr())
	}
	// The final check looks for leftover servers this way: it must see
	// a live one.
	if pids, err := testutil.RedisChildren(); err != nil || !slices.Contains(pids, srv.PID()) {
		t.Fatalf("RedisChildren() = %v, %v; want it to hold %d", pids, err, srv.PID())
	}
	ctx := context.Background()
	clients := singleClients(t, l, srv)

	t.Run("password", func(t *testing.T) {
		c := redis.NewClient(testutil.FastFailOptions(l.Host(0).NS, "", srv.Addr()).Simple())
		defer c.Close()
		if err := c.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
			t.Fatalf("PING without the password: %v, want NOAUTH", err)
		}
	})

	t.Run("partition", func(t *testing.T) {
		testPartition(t, l, func(i int) func(context.Context) error { return ping(clients[i]) })
	})

	t.Run("kill and restart", func(t *testing.T) { testKillRestart(t, l, srv, clients[0]) })

	t.Run("slow link", func(t *testing.T) { testSlowLink(t, l, srv, password, clients[0]) })

	t.Run("pause and resume", func(t *testing.T) {
		srv.Pause(t)
		mustFail(t, "paused server", 2*time.Second, ping(clients[2]))
		srv.Resume(t)
		eventually(t, "host 2 after Resume", 5*time.Second, ping(clients[2]))
	})
}

// singleClients is a client of srv on each host, each checked to reach it
// through its host's own link.
func singleClients(t *testing.T, l *fleetlab.Lab, srv *testutil.RedisServer) []*redis.Client {
	ctx := context.Background()
	clients := make([]*redis.Client, l.Hosts())
	for i := range clients {
		h := l.Host(i)
		c := srv.ClientIn(h.NS)
		t.Cleanup(func() { c.Close() })
		clients[i] = c
		key := fmt.Sprintf("host:%d", i)
		if err := c.Set(ctx, key, h.NS.Name(), 0).Err(); err != nil {
			t.Fatalf("host %d: SET: %v", i, err)
		}
		if got, err := c.Get(ctx, key).Result(); err != nil || got != h.NS.Name() {
			t.Fatalf("host %d: GET = %q, %v", i, got, err)
		}
		// The server sees the host's Eth1 address: the call went
		// through that host's own link.
		info, err := c.Do(ctx, "CLIENT", "INFO").Text()
		if want := "addr=" + h.Eth1Addr.String() + ":"; err != nil || !strings.Contains(info, want) {
			t.Fatalf("host %d: CLIENT INFO %q (%v), want %s", i, info, err, want)
		}
	}

	return clients
}

// testKillRestart: a killed server fails calls, and restarts at its
// address, another process, empty.
func testKillRestart(t *testing.T, l *fleetlab.Lab, srv *testutil.RedisServer, c *redis.Client) {
	ctx := context.Background()
	if err := c.Set(ctx, "survivor", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	pid := srv.PID()
	srv.Kill(t)
	mustFail(t, "killed server", 2*time.Second, ping(c))
	srv.Restart(t)
	if srv.PID() == pid || srv.Addr() != l.RedisAddr() {
		t.Fatalf("restart: pid %d -> %d, addr %s", pid, srv.PID(), srv.Addr())
	}
	eventually(t, "host 0 after restart", 5*time.Second, ping(c))
	if n, err := c.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("restarted server holds %d keys (%v), want empty", n, err)
	}
}

// testSlowLink: a delaying proxy costs one delayed round trip per call,
// fails calls past a client's timeout, and costs nothing once fast again.
func testSlowLink(t *testing.T, l *fleetlab.Lab, srv *testutil.RedisServer, password string, direct0 *redis.Client) {
	const delay = 100 * time.Millisecond
	proxy := testutil.StartDelayProxy(t, l.RedisNS, fmt.Sprintf("%s:%d", fleetlab.RedisIP, 6380), srv.Addr(), delay)
	c := redis.NewClient(testutil.FastFailOptions(l.Host(0).NS, password, proxy.Addr()).Simple())
	defer c.Close()
	// The first call also dials and shakes hands: several round trips.
	if took, err := within(5*time.Second, ping(c)); err != nil {
		t.Fatalf("first PING through the proxy: %v (after %v)", err, took)
	} else {
		t.Logf("first PING through the proxy (dial, handshake) took %v", took.Round(time.Millisecond))
	}
	// On an open connection a call costs one delayed round trip: the
	// delay each way on top of the same call without the proxy. Both
	// are the quickest of three, so a moment of load on the machine
	// does not count; a proxy that delayed a direction twice would
	// take 4 x delay, which the bound of 3 x delay (plus the direct
	// call's time) tells apart while leaving one delay for noise.
	direct, took := quickestPing(t, direct0), quickestPing(t, c)
	t.Logf("PING direct %v, through a %v proxy %v", direct, delay, took)
	if took < 2*delay || took > 3*delay+direct {
		t.Fatalf("PING through a %v proxy took %v (direct %v), want %v plus the direct call's time", delay, took, direct, 2*delay)
	}
	proxy.SetDelay(2 * time.Second)
	mustFail(t, "PING over a 2 s link", time.Second, ping(c))
	proxy.SetDelay(0)
	// Fast again: no longer the 4 s round trip of the slow link.
	took, err := within(5*time.Second, ping(c))
	if err != nil || took >= 4*time.Second {
		t.Fatalf("PING after the link is fast again: %v after %v", err, took)
	}
}

// quickestPing is the quickest of three PINGs on c.
func quickestPing(t *testing.T, c redis.UniversalClient) time.Duration {
	t.Helper()
	best := time.Duration(1 << 62)
	for range 3 {
		took, err := within(5*time.Second, ping(c))
		if err != nil {
			t.Fatalf("PING: %v (after %v)", err, took)
		}
		best = min(best, took)
	}
	return best
}

func testCluster(t *testing.T, l *fleetlab.Lab) {
	cluster := l.StartCluster(t, testutil.RedisClusterConfig{Shards: 3})
	ctx := context.Background()
	clients := make([]*redis.ClusterClient, l.Hosts())
	for i := range clients {
		c := cluster.ClientIn(l.Host(i).NS)
		t.Cleanup(func() { c.Close() })
		clients[i] = c
		for k := range 30 {
			key := fmt.Sprintf("h%d:k%d", i, k)
			if err := c.Set(ctx, key, i, 0).Err(); err != nil {
				t.Fatalf("host %d: SET %s: %v", i, key, err)
			}
			if got, err := c.Get(ctx, key).Int(); err != nil || got != i {
				t.Fatalf("host %d: GET %s = %d, %v", i, key, got, err)
			}
		}
	}
	// 90 keys over 16384 slots: every shard holds some, so every host
	// reached every shard.
	for j, s := range cluster.Shards {
		c := s.Client()
		n, err := c.DBSize(ctx).Result()
		c.Close()
		if err != nil || n == 0 {
			t.Fatalf("shard %d holds %d keys (%v)", j, n, err)
		}
	}

	get := func(c *redis.ClusterClient) func(context.Context) error {
		return func(ctx context.Context) error { return c.Get(ctx, "h0:k0").Err() }
	}
	t.Run("partition", func(t *testing.T) {
		testPartition(t, l, func(i int) func(context.Context) error { return get(clients[i]) })
	})

	t.Run("restart a shard", func(t *testing.T) {
		master, err := clients[0].MasterForKey(ctx, "h0:k0")
		if err != nil {
			t.Fatal(err)
		}
		var shard *testutil.RedisServer
		for _, s := range cluster.Shards {
			if s.Addr() == master.Options().Addr {
				shard = s
			}
		}
		if shard == nil {
			t.Fatalf("h0:k0 on %s, not one of %v", master.Options().Addr, cluster.Addrs())
		}
		shard.Kill(t)
		shard.Restart(t)
		cluster.WaitOK(t)
		eventually(t, "GET after the shard restarted", 10*time.Second, func(ctx context.Context) error {
			err := clients[0].Get(ctx, "h0:k0").Err()
			if errors.Is(err, redis.Nil) {
				return nil // the restarted shard is empty
			}
			return fmt.Errorf("GET h0:k0 = %v, want redis.Nil", err)
		})
	})
}
