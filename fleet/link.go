// SPDX-License-Identifier: Apache-2.0

package fleet

import (
	"time"

	"github.com/xdplimit/xdplimit/policy"
)

// linkState is whether Redis answers, with the retry backoff while it does
// not. Changes of state are logged once each, never once per sync.
type linkState struct {
	sync     time.Duration
	tls      bool
	known    bool // a first exchange succeeded or failed
	up       bool
	kind     ErrorKind
	lastErr  string
	since    time.Time
	failures int
	next     time.Time // no exchange before this while down
}

const maxBackoff = 5 * time.Second

func (s *linkState) init(sync time.Duration, tls bool) { s.sync, s.tls = sync, tls }

// due reports whether a sync may talk to Redis now.
func (s *linkState) due(now time.Time) bool { return s.up || !now.Before(s.next) }

func (s *linkState) failed(err error, logf func(string, ...any), fb policy.Fallback, m *Metrics) {
	kind, hint := classify(err, s.tls)
	now := time.Now()
	s.failures++
	backoff := min(s.sync<<min(s.failures, 10), maxBackoff)
	s.next = now.Add(backoff)
	if s.up || !s.known || kind != s.kind {
		logf("fleet: %s (%v); enforcing with fallback %s, retrying with backoff up to %s",
			hint, err, fb, maxBackoff)
		s.since = now
	}
	s.known, s.up, s.kind, s.lastErr = true, false, kind, err.Error()
	m.up.Set(0)
}

func (s *linkState) ok(logf func(string, ...any), m *Metrics) {
	now := time.Now()
	if !s.up {
		if s.known {
			logf("fleet: Redis answers again after %s; fleet limits in force", now.Sub(s.since).Round(time.Millisecond))
		} else {
			logf("fleet: Redis answers; fleet limits in force")
		}
		s.since = now
	}
	s.known, s.up, s.failures, s.kind, s.lastErr = true, true, 0, "", ""
	m.up.Set(1)
}

// Status is the engine's state for `xdplimit status`.
type Status struct {
	Up        bool      `json:"up"`
	Known     bool      `json:"known"`
	Since     time.Time `json:"since"`
	ErrorKind ErrorKind `json:"error_kind,omitempty"`
	LastError string    `json:"last_error,omitempty"`
	Levels    int       `json:"levels"`
	Sync      string    `json:"sync"`
	Fallback  string    `json:"fallback"`
	Namespace string    `json:"namespace"`
	Redis     []string  `json:"redis"`
}

// Status reports the engine's state.
func (e *Engine) Status() Status {
	e.mu.Lock()
	defer e.mu.Unlock()
	f := e.opts.Fleet
	return Status{Up: e.link.up, Known: e.link.known, Since: e.link.since, ErrorKind: e.link.kind,
		LastError: e.link.lastErr, Levels: len(e.levels), Sync: f.Sync.String(),
		Fallback: f.Fallback.String(), Namespace: f.Namespace, Redis: f.Redis}
}
