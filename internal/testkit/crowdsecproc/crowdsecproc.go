// SPDX-License-Identifier: Apache-2.0

// Package crowdsecproc owns the CrowdSec fixtures of the tests: it runs a
// CrowdSec Local API (LAPI) as a child process, from Debian's crowdsec
// binaries as `make deps` unpacks them, writes its configuration, registers
// bouncers and adds decisions. Every path of the server's configuration
// points into one directory, so servers never share state with each other
// or the host. The server's methods return errors; testing.go holds the
// testing.TB wrappers tests call (Start, Bouncer, KeyFile).
package crowdsecproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/internal/command"
	"github.com/xdplimit/xdplimit/internal/cpupin"
	"github.com/xdplimit/xdplimit/internal/netns"
)

// DefaultDir is where scripts/deps.sh unpacks Debian's crowdsec package;
// the environment variable DirEnv overrides it (for both).
const (
	DefaultDir = "/var/cache/xdplimit-deps/crowdsec"
	DirEnv     = "XDPLIMIT_CROWDSEC_DIR"
)

// Binaries are the two programs a server needs.
type Binaries struct {
	Crowdsec, Cscli string
}

// Find locates crowdsec and cscli: in $XDPLIMIT_CROWDSEC_DIR (or
// DefaultDir)/usr/bin, else on PATH (a host with the package installed).
func Find() (Binaries, error) {
	dir := os.Getenv(DirEnv)
	if dir == "" {
		dir = DefaultDir
	}
	b := Binaries{filepath.Join(dir, "usr/bin/crowdsec"), filepath.Join(dir, "usr/bin/cscli")}
	if isExec(b.Crowdsec) && isExec(b.Cscli) {
		return b, nil
	}
	c, err1 := exec.LookPath("crowdsec")
	s, err2 := exec.LookPath("cscli")
	if err1 == nil && err2 == nil {
		return Binaries{c, s}, nil
	}
	return Binaries{}, fmt.Errorf("crowdsec and cscli not in %s/usr/bin nor on PATH (make deps unpacks them)", dir)
}

func isExec(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// Server is one LAPI child process with its own sqlite database, on a
// free port of 127.0.0.1 (of its network namespace). Kill and Start again
// restart it on the same port and database, as a crash and a service
// restart would.
type Server struct {
	ns      *netns.Netns // nil: the caller's
	bin     Binaries
	dir     string
	port    int
	timeout time.Duration
	started bool // once: the port is fixed from then on

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited and been reaped
}

// New writes a configuration into dir (which the caller removes) and
// registers the machine cscli logs in as; Start starts the server.
func New(bin Binaries, dir string) (*Server, error) { return NewIn(nil, bin, dir) }

// NewIn is New for a server in network namespace ns: the server and every
// cscli run in it (cscli talks to the LAPI on its loopback), and so do the
// server's health checks. Clients must dial from ns too.
func NewIn(ns *netns.Netns, bin Binaries, dir string) (*Server, error) {
	s := &Server{ns: ns, bin: bin, dir: dir, timeout: 30 * time.Second}
	for _, d := range []string{"etc", "data", "hub", "plugins"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	if err := s.pickPort(); err != nil {
		return nil, err
	}
	files := map[string]string{
		// cscli refuses to run without a hub index; an empty one is enough.
		"hub/.index.json":     "{}\n",
		"etc/simulation.yaml": "simulation: false\n",
		// The default profile would only matter to the detection engine,
		// which does not run (-no-cs); decisions come from cscli.
		"etc/profiles.yaml": "name: default_ip_remediation\nfilters:\n - Alert.Remediation == true && Alert.GetScope() == \"Ip\"\n" +
			"decisions:\n - type: ban\n   duration: 4h\non_success: break\n",
		"etc/acquis.yaml": "",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return nil, err
		}
	}
	if err := s.writeConfig(); err != nil {
		return nil, err
	}
	// cscli writes the machine straight into the database: no server needed.
	if _, err := s.Cscli(context.Background(), "machines", "add", "xdplimit-test", "--auto",
		"-f", filepath.Join(dir, "etc/local_api_credentials.yaml")); err != nil {
		return nil, err
	}
	return s, nil
}

// pickPort takes a port the kernel says is free. Another process may take
// it before the server binds it; Start then picks another.
func (s *Server) pickPort() error {
	return s.in(func() error {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		s.port = l.Addr().(*net.TCPAddr).Port
		return l.Close()
	})
}

// in runs fn on a locked thread in the server's namespace (the caller's
// without one); processes fn forks are born there.
func (s *Server) in(fn func() error) error {
	if s.ns == nil {
		return cpupin.Locked(fn)
	}
	return s.ns.Do(fn)
}

// writeConfig writes config.yaml. No online_client section: the server
// never calls the Central API (unreachable here). Prometheus is off, so
// servers do not fight over its fixed port.
func (s *Server) writeConfig() error {
	d := s.dir
	cfg := fmt.Sprintf(`common:
  daemonize: false
  log_media: stdout
  log_level: info
  working_dir: %[1]s
config_paths:
  config_dir: %[1]s/etc/
  data_dir: %[1]s/data/
  simulation_path: %[1]s/etc/simulation.yaml
  hub_dir: %[1]s/hub/
  index_path: %[1]s/hub/.index.json
  notification_dir: %[1]s/etc/notifications/
  plugin_dir: %[1]s/plugins/
crowdsec_service:
  acquisition_path: %[1]s/etc/acquis.yaml
cscli:
  output: human
  color: false
db_config:
  log_level: info
  type: sqlite
  db_path: %[1]s/data/crowdsec.db
  use_wal: true
api:
  client:
    credentials_path: %[1]s/etc/local_api_credentials.yaml
  server:
    log_level: info
    listen_uri: 127.0.0.1:%[2]d
    profiles_path: %[1]s/etc/profiles.yaml
    trusted_ips:
      - 127.0.0.1
prometheus:
  enabled: false
`, d, s.port)
	return os.WriteFile(s.ConfigPath(), []byte(cfg), 0o644)
}

// ConfigPath is the server's config.yaml (cscli -c takes it).
func (s *Server) ConfigPath() string { return filepath.Join(s.dir, "config.yaml") }

// URL is the LAPI's base URL.
func (s *Server) URL() string { return "http://127.0.0.1:" + strconv.Itoa(s.port) }

func (s *Server) logPath() string { return filepath.Join(s.dir, "crowdsec.log") }

// Output is the server's log so far (every run), for failure messages.
func (s *Server) Output() string { return command.ChildLog(s.logPath()) }

// PID is the running server's process id, 0 when none runs.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Start starts the server and waits until /health answers. When the
// first start's server exits before that (its port was taken meanwhile),
// it retries on another free port, at most three times. A restart keeps
// the port: clients hold the URL.
func (s *Server) Start() error {
	var err error
	for range 3 {
		var exited bool
		exited, err = s.startOnce()
		if err == nil {
			s.started = true
		}
		if err == nil || !exited || s.started {
			return err
		}
		if perr := s.pickPort(); perr != nil {
			return perr
		}
		if werr := s.writeConfig(); werr != nil {
			return werr
		}
	}
	return err
}

func (s *Server) startOnce() (exited bool, err error) {
	if s.PID() != 0 {
		return false, errors.New("crowdsec already running")
	}
	cmd := exec.Command(s.bin.Crowdsec, "-c", s.ConfigPath(), "-no-cs")
	cmd.Dir = s.dir
	done, err := command.StartChild(s.in, cmd, s.logPath())
	if err != nil {
		return false, fmt.Errorf("start crowdsec: %w", err)
	}
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()

	client := s.HTTPClient()
	client.Timeout = time.Second
	deadline := time.Now().Add(s.timeout)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			s.mu.Lock()
			s.cmd, s.done = nil, nil
			s.mu.Unlock()
			return true, fmt.Errorf("crowdsec exited before answering on %s", s.URL())
		default:
		}
		resp, err := client.Get(s.URL() + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return false, nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = s.Kill()
	return false, fmt.Errorf("crowdsec did not answer on %s within %v", s.URL(), s.timeout)
}

// HTTPClient is a client that dials from the server's namespace.
func (s *Server) HTTPClient() *http.Client {
	if s.ns == nil {
		return &http.Client{}
	}
	return &http.Client{Transport: &http.Transport{DialContext: s.ns.DialContext}}
}

// Stop ends the server by its PID: SIGTERM, then SIGKILL after 10 s. It
// does nothing when no server runs.
func (s *Server) Stop() error { return s.signal(unix.SIGTERM, 10*time.Second) }

// Kill ends the server at once (SIGKILL), as a crash would.
func (s *Server) Kill() error { return s.signal(unix.SIGKILL, 10*time.Second) }

func (s *Server) signal(sig syscall.Signal, patience time.Duration) error {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd, s.done = nil, nil
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-done:
		return nil
	case <-time.After(patience):
	}
	if err := cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	<-done
	return fmt.Errorf("crowdsec (pid %d) ignored %v for %v; killed", cmd.Process.Pid, sig, patience)
}

// Cscli runs cscli against this server's configuration and returns its
// standard output; the error carries standard error.
func (s *Server) Cscli(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.bin.Cscli, append([]string{"-c", s.ConfigPath()}, args...)...)
	cmd.Dir = s.dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	var out []byte
	err := s.in(func() error {
		var err error
		out, err = cmd.Output()
		return err
	})
	if err != nil {
		return string(out), fmt.Errorf("cscli %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}
