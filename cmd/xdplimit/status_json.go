// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"encoding/hex"
	"time"

	"github.com/xdplimit/xdplimit/agent"
	"github.com/xdplimit/xdplimit/loader"
	"github.com/xdplimit/xdplimit/maps"
)

// `xdplimit status -o json`: the fields, stable and snake_case, are
// documented in docs/json.md.

type statusesJSON struct {
	Interfaces []statusJSON `json:"interfaces"`
}

type statusJSON struct {
	Interface string `json:"interface"`
	Mode      string `json:"mode"`
	ProgramID uint32 `json:"program_id"`
	Attached  string `json:"attached"`
	// OwnerPID is the attach process in charge; OwnerAlive whether it runs.
	OwnerPID   uint32         `json:"owner_pid"`
	OwnerAlive bool           `json:"owner_alive"`
	Policy     policyJSON     `json:"policy"`
	Clock      string         `json:"clock"`
	TickNs     int64          `json:"tick_ns"`
	StateTable stateTableJSON `json:"state_table"`
	Bans       banCountJSON   `json:"bans"`
	Rules      []ruleJSON     `json:"rules"`
	// Counters are the global counters by name (docs/metrics.md).
	Counters map[string]countJSON `json:"counters"`
	Fleet    *fleetJSON           `json:"fleet,omitempty"`
	// Autopilot is what the attach process's autopilot reports, when it
	// runs (docs/autopilot.md).
	Autopilot *agent.AutopilotView `json:"autopilot,omitempty"`
	// Conversations: how each conversation check runs now (what they
	// dropped is in Counters: no_connection, no_socket, ...).
	Conversations map[string]convCheckJSON `json:"conversations"`
}

type convCheckJSON struct {
	When   string `json:"when"` // off, under_attack or always
	Armed  bool   `json:"armed"`
	Shadow bool   `json:"shadow"`
	// Forwarded: how what the host forwards meets the check: pass or
	// conntrack.
	Forwarded string `json:"forwarded"`
}

type policyJSON struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
}

type stateTableJSON struct {
	Capacity uint32 `json:"capacity"`
	// Tracked is null unless --count-sources walked the table.
	Tracked *int `json:"tracked"`
}

type banCountJSON struct {
	InForce  int    `json:"in_force"`
	Capacity uint32 `json:"capacity"`
}

type countJSON struct {
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

type ruleJSON struct {
	Rule string `json:"rule"`
	// Verdicts by name: pass, drop, shadow_drop, syncookie, reject.
	Verdicts   map[string]countJSON `json:"verdicts"`
	LevelDrops []uint64             `json:"level_drops"`
	// SynCookieACKs and Reject only for rules with that action.
	SynCookieACKs *cookieACKsJSON `json:"syncookie_acks,omitempty"`
	Reject        *rejectJSON     `json:"reject,omitempty"`
}

type cookieACKsJSON struct {
	Valid   uint64 `json:"valid"`
	Invalid uint64 `json:"invalid"`
}

type rejectJSON struct {
	Sent       uint64 `json:"sent"`
	Suppressed uint64 `json:"suppressed"`
}

type fleetJSON struct {
	Levels int `json:"levels"`
	// State: up, down, pending (first sync), not_running (no attach
	// process) or unknown (its status file unreadable).
	State       string `json:"state"`
	LostReports uint64 `json:"lost_reports"`
}

func statusOf(s *loader.State, countSources bool) (statusJSON, error) {
	m := s.Meta
	st := statusJSON{Interface: s.Interface, Mode: s.Mode().String(), ProgramID: uint32(s.ProgramID),
		Attached: m.Attached.UTC().Format(time.RFC3339), OwnerPID: m.Pid, OwnerAlive: loader.OwnerAlive(m.Pid),
		Policy: policyJSON{Path: m.PolicyPath, SHA256: hex.EncodeToString(m.PolicySHA256[:])},
		Clock:  m.Clock.String(), TickNs: int64(m.Tick), StateTable: stateTableJSON{Capacity: s.Limiter.SourcesCapacity()},
		Rules: []ruleJSON{}, Counters: map[string]countJSON{}}
	if countSources {
		n, err := s.Limiter.TrackedSources()
		if err != nil {
			return st, err
		}
		st.StateTable.Tracked = &n
	}
	bans, err := s.Limiter.Bans()
	if err != nil {
		return st, err
	}
	st.Bans = banCountJSON{InForce: len(bans), Capacity: s.Limiter.BansCapacity()}
	rules, err := s.Limiter.RuleStats()
	if err != nil {
		return st, err
	}
	for _, r := range rules {
		rj := ruleJSON{Rule: r.Name, Verdicts: map[string]countJSON{}, LevelDrops: r.LevelDrops}
		for _, v := range maps.Verdicts {
			rj.Verdicts[v.String()] = countJSON(r.Verdicts[v])
		}
		if r.SynCookie {
			rj.SynCookieACKs = &cookieACKsJSON{Valid: r.CookieACKs[0], Invalid: r.CookieACKs[1]}
		}
		if r.Reject {
			rj.Reject = &rejectJSON{Sent: r.Verdicts[maps.VerdictReject].Packets, Suppressed: r.RejectSuppressed}
		}
		st.Rules = append(st.Rules, rj)
	}
	cs, err := s.Limiter.Counters()
	if err != nil {
		return st, err
	}
	for c, v := range cs {
		st.Counters[c.String()] = countJSON(v)
	}
	if st.Conversations, err = conversationsOf(s.Limiter); err != nil {
		return st, err
	}
	levels, err := s.Limiter.FleetLevels()
	if err != nil {
		return st, err
	}
	if len(levels) > 0 {
		st.Fleet = &fleetJSON{Levels: len(levels), State: fleetState(s.Interface, st.OwnerAlive),
			LostReports: cs[maps.CounterFleetLost].Packets}
	}
	st.Autopilot = autopilotOf(context.Background(), s.Interface, st.OwnerAlive)
	return st, nil
}

// fleetState is the fleet sync's state in one word, as printFleet says it.
func fleetState(iface string, owner bool) string {
	fs, err := agent.ReadFleetStatus(iface)
	switch {
	case !owner:
		return "not_running"
	case err != nil:
		return "unknown"
	case fs.Up:
		return "up"
	case !fs.Known:
		return "pending"
	}
	return "down"
}

func conversationsOf(l *maps.Limiter) (map[string]convCheckJSON, error) {
	cv, err := l.ConversationsInForce()
	if err != nil {
		return nil, err
	}
	armed, err := l.ConvArmed()
	if err != nil {
		return nil, err
	}
	out := map[string]convCheckJSON{}
	for _, c := range maps.AllChecks {
		cc := cv.Of(c)
		fw := "pass"
		if cc.Conntrack {
			fw = "conntrack"
		}
		out[c.String()] = convCheckJSON{When: cc.When(), Armed: cv.JudgesAll(c, armed),
			Shadow: cc.On && cc.Shadow, Forwarded: fw}
	}
	return out, nil
}
