// SPDX-License-Identifier: Apache-2.0

// Package redisproc runs redis-server child processes inside network
// namespaces, for the fleet tests (through internal/testkit/testutil, which adds
// testing.TB cleanup) and for the benchmark program; production does not
// use it. It does not import package testing: every failure is an error.
package redisproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/internal/command"
	"github.com/xdplimit/xdplimit/internal/netns"
)

// Config describes one redis-server.
type Config struct {
	// Addr is the address and port it listens on, in its namespace.
	Addr netip.AddrPort
	// Password, when set, is passed as --requirepass.
	Password string
	// Cluster starts the server with --cluster-enabled yes and its own
	// cluster config file.
	Cluster bool
	// Timeout bounds the wait for the first PONG (default 10 s).
	Timeout time.Duration
	// Dir holds the server's log and cluster config (the caller removes it).
	Dir string
}

// Server is a redis-server child process in a network namespace, without
// persistence (--save "" --appendonly no), so every start is empty.
type Server struct {
	ns   *netns.Netns
	cfg  Config
	args []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited and been reaped
}

// New prepares a server in ns; Start starts it.
func New(ns *netns.Netns, cfg Config) (*Server, error) {
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, fmt.Errorf("%s not found (make deps installs it): %w", bin, err)
		}
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	s := &Server{ns: ns, cfg: cfg}
	s.args = []string{
		"--bind", cfg.Addr.Addr().String(), "--port", strconv.Itoa(int(cfg.Addr.Port())),
		"--save", "", "--appendonly", "no", "--protected-mode", "no", "--daemonize", "no",
		"--dir", cfg.Dir,
	}
	if cfg.Password != "" {
		s.args = append(s.args, "--requirepass", cfg.Password)
	}
	if cfg.Cluster {
		// A short node timeout makes a killed shard visible (and a
		// restarted one healthy again) within a test's patience.
		s.args = append(s.args, "--cluster-enabled", "yes", "--cluster-node-timeout", "2000",
			"--cluster-config-file", filepath.Join(cfg.Dir, "nodes.conf"))
	}
	return s, nil
}

// Addr is "ip:port", as clients dial it.
func (s *Server) Addr() string { return s.cfg.Addr.String() }

// Password is the server's --requirepass.
func (s *Server) Password() string { return s.cfg.Password }

// NS is the server's namespace.
func (s *Server) NS() *netns.Netns { return s.ns }

func (s *Server) logPath() string { return filepath.Join(s.cfg.Dir, "redis.log") }

// Output is the server's log so far, for failure messages.
func (s *Server) Output() string { return command.ChildLog(s.logPath()) }

// PID is the current process's id (0 when killed and not restarted).
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Start forks redis-server from a thread inside the namespace (children
// inherit the forking thread's network namespace and keep the host's
// mounts, unlike `ip netns exec`; see command.StartChild) and waits until
// it answers PING.
func (s *Server) Start() error {
	cmd := exec.Command("redis-server", s.args...)
	done, err := command.StartChild(s.ns.Do, cmd, s.logPath())
	if err != nil {
		return fmt.Errorf("start redis-server in %s: %w", s.ns, err)
	}
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
	defer cancel()
	if err := s.waitPing(ctx, done); err != nil {
		return fmt.Errorf("redis-server %s in %s: %w\n%s", s.Addr(), s.ns, err, s.Output())
	}
	return nil
}

func (s *Server) waitPing(ctx context.Context, exited <-chan struct{}) error {
	c := redis.NewClient(FastFailOptions(s.ns, s.cfg.Password, s.Addr()).Simple())
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
			return fmt.Errorf("no PONG after %v: %v", s.cfg.Timeout, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// FastFailOptions are client options for tests and benchmarks: connections
// made from ns, no retries, one dial attempt and one-second deadlines, so a
// stopped or unreachable server shows as an error within about a second,
// not as a hang. Simple() and Cluster() turn them into either kind of
// client.
func FastFailOptions(ns *netns.Netns, password string, addrs ...string) *redis.UniversalOptions {
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
func DialIn(ns *netns.Netns) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return ns.DialContext
}

// Signal sends sig to the running server.
func (s *Server) Signal(sig unix.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return errors.New("not running")
	}
	select {
	case <-s.done:
		return fmt.Errorf("exited on its own:\n%s", s.Output())
	default:
	}
	return unix.Kill(s.cmd.Process.Pid, sig)
}

// Kill kills the process with SIGKILL, as a crash would, and waits until
// it is reaped. Clients then get connection refused.
func (s *Server) Kill() error {
	if err := s.Signal(unix.SIGKILL); err != nil {
		return err
	}
	s.reap()
	return nil
}

// reap waits for the exited process and forgets it.
func (s *Server) reap() {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done != nil {
		<-done
	}
	s.mu.Lock()
	s.cmd, s.done = nil, nil
	s.mu.Unlock()
}

// Stop ends the process we started, by its PID: SIGCONT (a paused process
// acts on nothing else), SIGTERM, and SIGKILL after 5 s. Stopping a server
// that does not run does nothing.
func (s *Server) Stop() error {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
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
	s.reap()
	return err
}
