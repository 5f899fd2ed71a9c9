// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/xdplimit/xdplimit/autopilot"
	"github.com/xdplimit/xdplimit/loader"
)

// AutopilotView is what GET /v1/autopilot answers and `xdplimit autopilot
// list` prints: the generated rules in force and the attacks in progress.
type AutopilotView struct {
	Interface string `json:"interface"`
	// On is whether the policy in force has an autopilot: section; Mode
	// (enforce or shadow) and Action (drop or limit) are its.
	On      bool            `json:"on"`
	Mode    string          `json:"mode,omitempty"`
	Action  string          `json:"action,omitempty"`
	Rules   []AutopilotRule `json:"rules"`
	Attacks []AttackView    `json:"attacks"`
}

// AutopilotRule is a generated rule: its fingerprint, the evidence, its
// age, and the rule as a policy's YAML.
type AutopilotRule struct {
	Name        string `json:"name"`
	Dest        string `json:"dest"`
	Fingerprint string `json:"fingerprint"`
	// Unmatched is what the attack also shares that rules cannot match.
	Unmatched       string    `json:"unmatched,omitempty"`
	Coverage        float64   `json:"attack_coverage"`
	BaselineShare   float64   `json:"baseline_share"`
	AttackSamples   int       `json:"attack_samples"`
	BaselineSamples int       `json:"baseline_samples"`
	Rate            uint64    `json:"rate"`
	Shadow          bool      `json:"shadow"`
	Kept            bool      `json:"kept"`
	Created         time.Time `json:"created"`
	// Enforced is when the rule was first in force in the datapath: the
	// zero time (omitted) while it is being put in force.
	Enforced   time.Time `json:"enforced,omitzero"`
	LastAttack time.Time `json:"last_attack"`
	AgeSeconds float64   `json:"age_seconds"`
	YAML       string    `json:"yaml"`
}

// AttackView is an attack in progress.
type AttackView struct {
	Dest         string    `json:"dest"`
	Since        time.Time `json:"since"`
	PeakRate     float64   `json:"peak_rate"`
	BaselineRate float64   `json:"baseline_rate"`
	// NoRule is why it has no rule of its own, when it was judged and got
	// none; Dismissed that an operator removed its rule.
	NoRule    string `json:"no_rule,omitempty"`
	Dismissed bool   `json:"dismissed,omitempty"`
}

func ruleView(g *autopilot.Generated, now time.Time) AutopilotRule {
	v := AutopilotRule{Name: g.Name, Dest: g.Dest.String(), Fingerprint: autopilot.Describe(g.Preds, true),
		Coverage: g.Coverage, BaselineShare: g.BaselineShare, AttackSamples: g.AttackSamples,
		BaselineSamples: g.BaselineSamples, Rate: g.Rate, Shadow: g.Shadow, Kept: g.Kept, Created: g.Created, Enforced: g.Enforced,
		LastAttack: g.LastAttack, AgeSeconds: now.Sub(g.Created).Seconds(), YAML: g.YAML()}
	if len(g.Left) > 0 {
		v.Unmatched = autopilot.Describe(g.Left, true)
	}
	return v
}

// The state file keeps the generated rules beside the interface's lock
// file, so that the next attach process of the interface (a restart, an
// upgrade) puts them in force from its first moment; `xdplimit detach`
// removes it with the limiter.

// AutopilotStatePath is where an agent keeps its generated rules.
func AutopilotStatePath(iface string) string {
	return filepath.Join(loader.RunDir(), iface+".autopilot.json")
}

type autopilotState struct {
	Rules []*autopilot.Generated `json:"rules"`
}

var errNoState = errors.New("no autopilot state")

func readAutopilotState(iface string) ([]*autopilot.Generated, error) {
	data, err := os.ReadFile(AutopilotStatePath(iface))
	if errors.Is(err, os.ErrNotExist) {
		return nil, errNoState
	}
	if err != nil {
		return nil, err
	}
	var s autopilotState
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", AutopilotStatePath(iface), err)
	}
	for _, g := range s.Rules {
		if g == nil || g.Name == "" || !g.Dest.Addr.IsValid() {
			return nil, fmt.Errorf("%s: a rule without a name or destination", AutopilotStatePath(iface))
		}
	}
	return s.Rules, nil
}

// writeAutopilotState replaces the file whole (a temporary file renamed
// over it): a reader never sees half of it.
func writeAutopilotState(iface string, rules []*autopilot.Generated) error {
	data, err := json.Marshal(autopilotState{Rules: rules})
	if err != nil {
		return err
	}
	path := AutopilotStatePath(iface)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func removeAutopilotState(iface string) { os.Remove(AutopilotStatePath(iface)) }

// serveAutopilot adds the autopilot's endpoints to the control socket.
func (a *Agent) serveAutopilot(mux *http.ServeMux) {
	ready := func(w http.ResponseWriter) bool {
		a.mu.Lock()
		ok := a.attached && a.autopilot != nil
		a.mu.Unlock()
		if !ok {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": errNotAttached.Error()})
		}
		return ok
	}
	mux.HandleFunc("GET /v1/autopilot", func(w http.ResponseWriter, _ *http.Request) {
		if ready(w) {
			writeJSON(w, http.StatusOK, a.autopilot.view())
		}
	})
	answer := func(w http.ResponseWriter, g *autopilot.Generated, err error) {
		switch {
		case errors.Is(err, autopilot.ErrNoSuchRule):
			writeJSON(w, http.StatusNotFound, map[string]string{"error": err.Error()})
		case errors.Is(err, errAutopilotOff):
			writeJSON(w, http.StatusConflict, map[string]string{"error": err.Error()})
		case g == nil:
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		case err != nil: // removed, but the rules in force could not follow
			writeJSON(w, http.StatusInternalServerError, map[string]any{"error": err.Error(), "rule": ruleView(g, time.Now())})
		default:
			writeJSON(w, http.StatusOK, ruleView(g, time.Now()))
		}
	}
	mux.HandleFunc("POST /v1/autopilot/rules/{name}/keep", func(w http.ResponseWriter, r *http.Request) {
		if ready(w) {
			g, err := a.autopilot.keep(r.PathValue("name"))
			answer(w, g, err)
		}
	})
	mux.HandleFunc("DELETE /v1/autopilot/rules/{name}", func(w http.ResponseWriter, r *http.Request) {
		if ready(w) {
			g, err := a.autopilot.remove(r.PathValue("name"))
			answer(w, g, err)
		}
	})
}
