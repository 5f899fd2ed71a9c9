// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/xdplimit/xdplimit/loader"
)

// Every agent serves HTTP on a unix socket of its own, IFACE.ctl in the
// run-time directory (mode 0600, removed on exit):
//
//	GET  /info     Info, as JSON: who runs, and where its metrics go
//	POST /reload   reload the policy file; ReloadResult as JSON, once done
//	GET  /metrics  this agent's own series (Prometheus exposition)
//	GET  /healthz  this agent's own health
//	GET  /v1/sources/ADDR  what this agent's limiter holds for an address
//	GET  /v1/autopilot     the autopilot's rules and attacks (AutopilotView)
//	POST /v1/autopilot/rules/NAME/keep  keep a generated rule past its attack
//	DELETE /v1/autopilot/rules/NAME     remove a generated rule
//
// `xdplimit reload` asks for a reload and prints the answer; the agent
// holding the metrics address gathers every other agent's series and
// health through their sockets.

// Info is what GET /info answers.
type Info struct {
	Pid       int    `json:"pid"`
	Interface string `json:"interface"`
	// Attached is false while the agent starts (waiting for its
	// interface).
	Attached bool   `json:"attached"`
	Policy   string `json:"policy"`
	// MetricsAddr is the configured metrics address ("" for none), and
	// MetricsHeld whether this agent holds it; Netns is the network
	// namespace it is bound in (its inode).
	MetricsAddr string `json:"metrics_addr"`
	MetricsHeld bool   `json:"metrics_held"`
	Netns       uint64 `json:"netns"`
}

// ReloadResult is what POST /reload answers: OK, or the error for which the
// policy was refused (Refused: the previous one stays in force) or no
// reload could run (the agent is starting or stopping); the policy's
// warnings either way.
type ReloadResult struct {
	OK       bool     `json:"ok"`
	Refused  bool     `json:"refused,omitempty"`
	Error    string   `json:"error,omitempty"`
	Policy   string   `json:"policy"`
	Warnings []string `json:"warnings,omitempty"`
}

// ControlSocket is the path of iface's control socket.
func ControlSocket(iface string) string { return filepath.Join(loader.RunDir(), iface+".ctl") }

// controlServer serves an agent's control socket.
type controlServer struct {
	path string
	srv  *http.Server
	done chan struct{}
}

// serveControl listens on the agent's socket. The agent holds the
// interface's lock, so a socket already there is a killed agent's: it is
// replaced.
func (a *Agent) serveControl() (*controlServer, error) {
	path := ControlSocket(a.cfg.Interface)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		os.Remove(path)
		return nil, fmt.Errorf("control socket: %w", err)
	}
	mux := http.NewServeMux()
	local := a.exp.LocalHandler()
	mux.Handle("GET /metrics", local)
	mux.Handle("GET /healthz", local)
	mux.Handle("GET /v1/sources/{addr}", local)
	mux.HandleFunc("GET /info", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, a.info()) })
	mux.HandleFunc("POST /reload", func(w http.ResponseWriter, _ *http.Request) {
		warnings, err := a.reload("xdplimit reload")
		res := ReloadResult{OK: err == nil, Policy: a.path, Warnings: warnings}
		code := http.StatusOK
		if err != nil {
			res.Error = err.Error()
		}
		if errors.Is(err, errNotAttached) || errors.Is(err, ErrStopped) {
			code = http.StatusServiceUnavailable
		} else if err != nil {
			res.Refused = true
		}
		writeJSON(w, code, res)
	})
	a.serveAutopilot(mux)
	c := &controlServer{path: path, done: make(chan struct{}),
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}}
	go func() {
		defer close(c.done)
		_ = c.srv.Serve(ln)
	}()
	return c, nil
}

// stop waits for the requests in flight (a reload, a scrape) and removes
// the socket.
func (c *controlServer) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.srv.Shutdown(ctx); err != nil {
		c.srv.Close()
	}
	<-c.done
	os.Remove(c.path)
}

func (a *Agent) info() Info {
	a.mu.Lock()
	attached := a.attached
	a.mu.Unlock()
	i := Info{Pid: os.Getpid(), Interface: a.cfg.Interface, Attached: attached, Policy: a.path,
		MetricsAddr: a.cfg.MetricsAddr, Netns: a.nsIno}
	if a.metrics != nil {
		i.MetricsHeld = a.metrics.held()
	}
	return i
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
