// SPDX-License-Identifier: Apache-2.0

package testutil

import (
	"context"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/internal/harness/redisproc"
)

// RequireRedis requires redis-server and redis-cli on PATH (Debian's
// redis-server and redis-tools; `make deps` installs both).
func RequireRedis(tb testing.TB) {
	tb.Helper()
	for _, bin := range []string{"redis-server", "redis-cli"} {
		_, err := exec.LookPath(bin)
		Require(tb, err == nil, "%s not found (make deps installs it): %v", bin, err)
	}
}

// RedisConfig describes one redis-server.
type RedisConfig struct {
	// Addr is the address and port it listens on, in its namespace.
	Addr netip.AddrPort
	// Password, when set, is passed as --requirepass.
	Password string
	// Cluster starts the server with --cluster-enabled yes and its own
	// cluster config file; StartRedisCluster joins such servers.
	Cluster bool
	// Timeout bounds the wait for the first PONG (default 10 s).
	Timeout time.Duration
}

// RedisServer is a redis-server child process in a network namespace
// (redisproc.Server), stopped in tb.Cleanup, which runs even when the test
// fails.
type RedisServer struct {
	*redisproc.Server
	ns *Netns
}

// StartRedis starts redis-server in ns and waits until it answers PING.
func StartRedis(tb testing.TB, ns *Netns, cfg RedisConfig) *RedisServer {
	tb.Helper()
	RequireRedis(tb)
	// TempDir before Cleanup: cleanups run last-in first-out, so the
	// server is stopped before its directory is removed.
	s, err := redisproc.New(ns.Netns, redisproc.Config{Addr: cfg.Addr, Password: cfg.Password,
		Cluster: cfg.Cluster, Timeout: cfg.Timeout, Dir: tb.TempDir()})
	if err != nil {
		tb.Fatal(err)
	}
	r := &RedisServer{Server: s, ns: ns}
	tb.Cleanup(func() {
		if err := r.Stop(); err != nil {
			tb.Errorf("stop redis-server %s: %v", r.Addr(), err)
		}
		if tb.Failed() {
			tb.Logf("redis-server %s output:\n%s", r.Addr(), r.Output())
		}
	})
	if err := r.Start(); err != nil {
		tb.Fatal(err)
	}
	return r
}

// Client returns a go-redis client that dials the server from its own
// namespace (the caller closes it).
func (r *RedisServer) Client() *redis.Client { return r.ClientIn(r.ns) }

// ClientIn returns a go-redis client whose connections are made from ns, a
// host of a FleetLab for instance.
func (r *RedisServer) ClientIn(ns *Netns) *redis.Client {
	return redis.NewClient(FastFailOptions(ns, r.Password(), r.Addr()).Simple())
}

// FastFailOptions are redisproc.FastFailOptions for a test's namespace.
func FastFailOptions(ns *Netns, password string, addrs ...string) *redis.UniversalOptions {
	return redisproc.FastFailOptions(ns.Netns, password, addrs...)
}

// DialIn returns a dial function whose sockets are created inside ns
// (redisproc.DialIn).
func DialIn(ns *Netns) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return redisproc.DialIn(ns.Netns)
}

// Pause stops the process (SIGSTOP): the kernel still accepts connections
// into its backlog, but nothing is answered, so calls time out.
func (r *RedisServer) Pause(tb testing.TB) {
	tb.Helper()
	if err := r.Signal(unix.SIGSTOP); err != nil {
		tb.Fatalf("pause redis-server %s: %v", r.Addr(), err)
	}
}

// Resume continues a paused process (SIGCONT).
func (r *RedisServer) Resume(tb testing.TB) {
	tb.Helper()
	if err := r.Signal(unix.SIGCONT); err != nil {
		tb.Fatalf("resume redis-server %s: %v", r.Addr(), err)
	}
}

// Kill kills the process with SIGKILL, as a crash would, and waits until
// it is reaped. Clients then get connection refused.
func (r *RedisServer) Kill(tb testing.TB) {
	tb.Helper()
	if err := r.Server.Kill(); err != nil {
		tb.Fatalf("kill redis-server %s: %v", r.Addr(), err)
	}
}

// Restart starts a new, empty server at the same address (killing the old
// one first if it still runs). A cluster node keeps its cluster config file,
// so it rejoins as the same node with the same slots, and no data.
func (r *RedisServer) Restart(tb testing.TB) {
	tb.Helper()
	if err := r.Stop(); err != nil {
		tb.Fatalf("stop redis-server %s: %v", r.Addr(), err)
	}
	if err := r.Start(); err != nil {
		tb.Fatal(err)
	}
}

// RedisChildren returns the pids of this process's redis-server children,
// running or not yet reaped: a test's final check that none outlived it.
func RedisChildren() ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		// "pid (comm) state ppid ...": comm may hold spaces, so split
		// after its closing parenthesis.
		s := string(stat)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		rest := strings.Fields(s[end+1:])
		if len(rest) < 2 || s[open+1:end] != "redis-server" {
			continue
		}
		if ppid, _ := strconv.Atoi(rest[1]); ppid == self {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}
