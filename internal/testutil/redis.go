package testutil

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sys/unix"
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

// RedisServer is a redis-server child process in a network namespace,
// without persistence (--save "" --appendonly no), so every start is empty.
// It is stopped in tb.Cleanup, which runs even when the test fails.
type RedisServer struct {
	ns   *Netns
	cfg  RedisConfig
	dir  string
	args []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited and been reaped
}

// StartRedis starts redis-server in ns and waits until it answers PING.
func StartRedis(tb testing.TB, ns *Netns, cfg RedisConfig) *RedisServer {
	tb.Helper()
	RequireRedis(tb)
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	// TempDir before Cleanup: cleanups run last-in first-out, so the
	// server is stopped before its directory is removed.
	r := &RedisServer{ns: ns, cfg: cfg, dir: tb.TempDir()}
	r.args = []string{
		"--bind", cfg.Addr.Addr().String(), "--port", strconv.Itoa(int(cfg.Addr.Port())),
		"--save", "", "--appendonly", "no", "--protected-mode", "no", "--daemonize", "no",
		"--dir", r.dir,
	}
	if cfg.Password != "" {
		r.args = append(r.args, "--requirepass", cfg.Password)
	}
	if cfg.Cluster {
		// A short node timeout makes a killed shard visible (and a
		// restarted one healthy again) within a test's patience.
		r.args = append(r.args, "--cluster-enabled", "yes", "--cluster-node-timeout", "2000",
			"--cluster-config-file", filepath.Join(r.dir, "nodes.conf"))
	}
	tb.Cleanup(func() {
		if err := r.stop(); err != nil {
			tb.Errorf("stop redis-server %s: %v", r.Addr(), err)
		}
		if tb.Failed() {
			tb.Logf("redis-server %s output:\n%s", r.Addr(), r.output())
		}
	})
	r.start(tb)
	return r
}

// Addr is "ip:port", as clients dial it.
func (r *RedisServer) Addr() string { return r.cfg.Addr.String() }

func (r *RedisServer) logPath() string { return filepath.Join(r.dir, "redis.log") }

// output is the server's log so far, for failure messages.
func (r *RedisServer) output() string {
	b, err := os.ReadFile(r.logPath())
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// PID is the current process's id (0 when killed and not restarted).
func (r *RedisServer) PID() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return 0
	}
	return r.cmd.Process.Pid
}

// start forks redis-server from a thread inside the namespace (children
// inherit the forking thread's network namespace and keep the host's
// mounts, unlike `ip netns exec`). Netns.Do's thread is locked and lives
// until the process is reaped, so Pdeathsig, which fires when the forking
// thread exits, kills the server only when the test binary dies.
func (r *RedisServer) start(tb testing.TB) {
	tb.Helper()
	// The output goes to a file, not a pipe: nothing to copy while it
	// runs, and every run of a restarted server appends to the same log.
	out, err := os.OpenFile(r.logPath(), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		tb.Fatalf("redis-server log: %v", err)
	}
	defer out.Close() // the child has its own copy
	cmd := exec.Command("redis-server", r.args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: unix.SIGKILL}
	done := make(chan struct{})
	started := make(chan error, 1)
	go func() {
		defer close(done)
		err := r.ns.Do(func() error {
			if err := cmd.Start(); err != nil {
				return err
			}
			started <- nil
			_ = cmd.Wait() // exit status is the test's choice (Kill)
			return nil
		})
		if err != nil {
			started <- err
		}
	}()
	if err := <-started; err != nil {
		tb.Fatalf("start redis-server in %s: %v", r.ns, err)
	}
	r.mu.Lock()
	r.cmd, r.done = cmd, done
	r.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Timeout)
	defer cancel()
	if err := r.waitPing(ctx, done); err != nil {
		tb.Fatalf("redis-server %s in %s: %v\n%s", r.Addr(), r.ns, err, r.output())
	}
}

func (r *RedisServer) waitPing(ctx context.Context, exited <-chan struct{}) error {
	c := r.Client()
	defer c.Close()
	for {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		err := c.Ping(pctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("exited before answering PING (last error %v)", err)
		case <-ctx.Done():
			return fmt.Errorf("no PONG after %v: %v", r.cfg.Timeout, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Client returns a go-redis client that dials the server from its own
// namespace (the caller closes it).
func (r *RedisServer) Client() *redis.Client { return r.ClientIn(r.ns) }

// ClientIn returns a go-redis client whose connections are made from ns, a
// host of a FleetLab for instance.
func (r *RedisServer) ClientIn(ns *Netns) *redis.Client {
	return redis.NewClient(FastFailOptions(ns, r.cfg.Password, r.Addr()).Simple())
}

// FastFailOptions are client options for tests: connections made from ns,
// no retries, one dial attempt and one-second deadlines, so a stopped or
// unreachable server shows as an error within about a second, not as a
// hang. Simple() and Cluster() turn them into either kind of client.
func FastFailOptions(ns *Netns, password string, addrs ...string) *redis.UniversalOptions {
	return &redis.UniversalOptions{
		Addrs:      addrs,
		Password:   password,
		Dialer:     DialIn(ns),
		MaxRetries: -1, DialerRetries: 1,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
		ContextTimeoutEnabled: true,
		PoolSize:              2,
	}
}

// DialIn returns a dial function (for redis.Options.Dialer and the like)
// whose sockets are created inside ns: a socket stays in the namespace it
// was created in, whichever thread uses it later.
func DialIn(ns *Netns) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var conn net.Conn
		err := ns.Do(func() error {
			var d net.Dialer
			var err error
			conn, err = d.DialContext(ctx, network, addr)
			return err
		})
		return conn, err
	}
}

// signal sends sig to the running server, if any.
func (r *RedisServer) signal(sig unix.Signal) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return errors.New("not running")
	}
	select {
	case <-r.done:
		return fmt.Errorf("exited on its own:\n%s", r.output())
	default:
	}
	return unix.Kill(r.cmd.Process.Pid, sig)
}

// Pause stops the process (SIGSTOP): the kernel still accepts connections
// into its backlog, but nothing is answered, so calls time out.
func (r *RedisServer) Pause(tb testing.TB) {
	tb.Helper()
	if err := r.signal(unix.SIGSTOP); err != nil {
		tb.Fatalf("pause redis-server %s: %v", r.Addr(), err)
	}
}

// Resume continues a paused process (SIGCONT).
func (r *RedisServer) Resume(tb testing.TB) {
	tb.Helper()
	if err := r.signal(unix.SIGCONT); err != nil {
		tb.Fatalf("resume redis-server %s: %v", r.Addr(), err)
	}
}

// Kill kills the process with SIGKILL, as a crash would, and waits until
// it is reaped. Clients then get connection refused.
func (r *RedisServer) Kill(tb testing.TB) {
	tb.Helper()
	if err := r.signal(unix.SIGKILL); err != nil {
		tb.Fatalf("kill redis-server %s: %v", r.Addr(), err)
	}
	r.reap()
}

// Restart starts a new, empty server at the same address (killing the old
// one first if it still runs). A cluster node keeps its cluster config file,
// so it rejoins as the same node with the same slots, and no data.
func (r *RedisServer) Restart(tb testing.TB) {
	tb.Helper()
	if err := r.stop(); err != nil {
		tb.Fatalf("stop redis-server %s: %v", r.Addr(), err)
	}
	r.start(tb)
}

// reap waits for the exited process and forgets it.
func (r *RedisServer) reap() {
	r.mu.Lock()
	done := r.done
	r.mu.Unlock()
	if done != nil {
		<-done
	}
	r.mu.Lock()
	r.cmd, r.done = nil, nil
	r.mu.Unlock()
}

// stop ends the process we started, by its PID: SIGCONT (a paused process
// acts on nothing else), SIGTERM, and SIGKILL after 5 s.
func (r *RedisServer) stop() error {
	r.mu.Lock()
	cmd, done := r.cmd, r.done
	r.mu.Unlock()
	if cmd == nil {
		return nil
	}
	pid := cmd.Process.Pid
	_ = unix.Kill(pid, unix.SIGCONT)
	_ = unix.Kill(pid, unix.SIGTERM)
	var err error
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		err = fmt.Errorf("pid %d ignored SIGTERM for 5 s; killed", pid)
		_ = unix.Kill(pid, unix.SIGKILL)
	}
	r.reap()
	return err
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
