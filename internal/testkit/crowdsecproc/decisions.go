// SPDX-License-Identifier: Apache-2.0

package crowdsecproc

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// AddBouncer registers a bouncer and returns its API key (cscli bouncers
// add NAME -o raw prints the key alone).
func (s *Server) AddBouncer(ctx context.Context, name string) (string, error) {
	out, err := s.Cscli(ctx, "bouncers", "add", name, "-o", "raw")
	if err != nil {
		return "", err
	}
	key := strings.TrimSpace(out)
	if key == "" || strings.ContainsAny(key, " \n") {
		return "", errors.New("cscli bouncers add printed no key: " + out)
	}
	return key, nil
}

// DeleteBouncer removes a bouncer: its key is refused from then on.
func (s *Server) DeleteBouncer(ctx context.Context, name string) error {
	_, err := s.Cscli(ctx, "bouncers", "delete", name)
	return err
}

// Decision is one decision to add: Value is an address (scope Ip) or a
// CIDR (scope Range); Type defaults to ban, Reason to cscli's own
// ("manual 'ban' from 'xdplimit-test'").
type Decision struct {
	Value    string
	Range    bool
	Duration time.Duration
	Type     string
	Reason   string
}

// Add adds one decision with cscli decisions add (origin "cscli"). It
// needs the server running: cscli sends it to the LAPI.
//
// CrowdSec 1.4's LAPI refuses an alert when SQLite reports the database
// busy, which happens when a bouncer's poll writes its pull time at the
// same instant (later CrowdSec retries by itself): Add tries again, up to
// five times. A refused attempt may leave its decision behind, so a caller
// counting new decisions must not poll while it adds.
func (s *Server) Add(ctx context.Context, d Decision) error {
	var err error
	for try := range 5 {
		if try > 0 {
			time.Sleep(time.Duration(try) * 200 * time.Millisecond)
		}
		if err = s.add(ctx, d); err == nil || !strings.Contains(err.Error(), "database is locked") {
			return err
		}
	}
	return err
}

func (s *Server) add(ctx context.Context, d Decision) error {
	args := []string{"decisions", "add", "-d", d.Duration.String()}
	if d.Range {
		args = append(args, "-r", d.Value)
	} else {
		args = append(args, "-i", d.Value)
	}
	if d.Type != "" {
		args = append(args, "-t", d.Type)
	}
	if d.Reason != "" {
		args = append(args, "-R", d.Reason)
	}
	_, err := s.Cscli(ctx, args...)
	return err
}

// DeleteIP deletes the decisions on one address (cscli decisions delete
// -i), DeleteRange those on one range (-r).
func (s *Server) DeleteIP(ctx context.Context, addr string) error {
	_, err := s.Cscli(ctx, "decisions", "delete", "-i", addr)
	return err
}

func (s *Server) DeleteRange(ctx context.Context, cidr string) error {
	_, err := s.Cscli(ctx, "decisions", "delete", "-r", cidr)
	return err
}

// Import adds many decisions of one scope ("Ip" or "Range") in one call:
// cscli decisions import sends them as one alert, which the LAPI stores in
// bulk (10k in ~2 s here, against ~0.1 s per decisions add). Their origin
// is "cscli-import"; duration, type and reason come from each Decision
// (its Range field is ignored: import takes the scope for the whole file).
func (s *Server) Import(ctx context.Context, scope string, ds []Decision) error {
	type line struct {
		Duration string `json:"duration"`
		Reason   string `json:"reason,omitempty"`
		Type     string `json:"type,omitempty"`
		Value    string `json:"value"`
	}
	lines := make([]line, len(ds))
	for i, d := range ds {
		lines[i] = line{Duration: d.Duration.String(), Reason: d.Reason, Type: d.Type, Value: d.Value}
	}
	b, err := json.Marshal(lines)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(s.dir, "import-*.json")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	_, err = s.Cscli(ctx, "decisions", "import", "-i", filepath.Clean(f.Name()), "--scope", scope)
	return err
}
