// SPDX-License-Identifier: Apache-2.0

package replay

import (
	"encoding/hex"
	"time"

	"github.com/xdplimit/xdplimit/maps"
)

// `xdplimit policy test -o json`: the report as JSON, with stable
// snake_case field names (docs/json.md). Counts are {packets, bytes};
// times since the first frame are in seconds.

// ReportJSON is a Report as JSON.
type ReportJSON struct {
	Policy     PolicyJSON `json:"policy"`
	Capture    string     `json:"capture"`
	Frames     int        `json:"frames"`
	First      string     `json:"first,omitempty"` // RFC 3339, ns
	Last       string     `json:"last,omitempty"`
	MaxSources uint32     `json:"max_sources"`
	TrackAfter uint32     `json:"track_after"`

	Rules            []RuleJSON `json:"rules"`
	Allow            Counts     `json:"allow"`
	Deny             Counts     `json:"deny"`
	Unmatched        Counts     `json:"unmatched"`
	Malformed        Counts     `json:"malformed"`
	MalformedDropped Counts     `json:"malformed_dropped"`
	// Unparsed counts what the parser could not judge, by kind
	// (truncated, bad_length, ...): only the kinds the capture held.
	Unparsed map[string]Counts `json:"unparsed"`
	NonIP    Counts            `json:"non_ip"`
	Banned   Counts            `json:"banned"`
	// NoRequest: the reflection guard's drops; RequestsRecorded, the
	// requests it knew of; NotReplayed, the checks the replay cannot run.
	NoRequest        Counts            `json:"no_request"`
	RequestsRecorded uint64            `json:"requests_recorded"`
	NotReplayed      []string          `json:"not_replayed"`
	Bans             []BanEventJSON    `json:"bans"`
	Top              []SourceDropsJSON `json:"top"`

	Explained []ExplanationJSON `json:"explained"`

	// What about the capture affects how the numbers read.
	Short       Counts      `json:"short"`
	Truncated   int         `json:"truncated"`
	Cut         int         `json:"cut"`
	Backwards   int         `json:"backwards"`
	NoTime      int         `json:"no_time"`
	NoLinkLayer int         `json:"no_link_layer"`
	Outgoing    Counts      `json:"outgoing"`
	CutOff      *CutOffJSON `json:"cut_off"`
	Warnings    []string    `json:"warnings"`
}

// PolicyJSON names the policy a report is of.
type PolicyJSON struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
	Mode   string `json:"mode"`
}

// RuleJSON is what one rule did.
type RuleJSON struct {
	Rule      string `json:"rule"`
	Line      int    `json:"line"`
	Pass      Counts `json:"pass"`
	Drop      Counts `json:"drop"`
	Shadow    Counts `json:"shadow"`
	SynCookie Counts `json:"syncookie"`
	Reject    Counts `json:"reject"`
	// RefusedByLevel is in policy order: the rule's own limit, then its
	// aggregates.
	RefusedByLevel []uint64 `json:"refused_by_level"`
}

// BanEventJSON is a ban a rule started.
type BanEventJSON struct {
	Frame  int     `json:"frame"`
	Start  float64 `json:"start"`
	For    float64 `json:"for"`
	Prefix string  `json:"prefix"`
	Rule   string  `json:"rule"`
	Shadow bool    `json:"shadow"`
}

// SourceDropsJSON is one source's refusals under one rule.
type SourceDropsJSON struct {
	Source    string `json:"source"` // "" for frames without an IP source
	Rule      string `json:"rule"`
	Drop      Counts `json:"drop"`
	Shadow    Counts `json:"shadow"`
	SynCookie Counts `json:"syncookie"`
	Reject    Counts `json:"reject"`
}

// ExplanationJSON is what decided one frame.
type ExplanationJSON struct {
	Frame    int     `json:"frame"`
	Offset   float64 `json:"offset"`
	Length   int     `json:"length"`
	Packet   string  `json:"packet"`
	Why      string  `json:"why"`
	Verdict  string  `json:"verdict"`
	Rule     int     `json:"rule"`  // index in the policy, -1 when no rule decided
	Level    int     `json:"level"` // refusing level in policy order, -1 when none refused
	Key      string  `json:"key,omitempty"`
	Port     uint16  `json:"port,omitempty"`
	Short    bool    `json:"short"`
	Outgoing bool    `json:"outgoing"`
	Text     string  `json:"text"`
}

// CutOffJSON is where a capture ended inside a record.
type CutOffJSON struct {
	Frame      int   `json:"frame"`
	Offset     int64 `json:"offset"`
	End        int64 `json:"end"`
	Compressed bool  `json:"compressed"`
}

// JSON is the report as `policy test -o json` prints it.
func (r *Report) JSON() ReportJSON {
	p := r.Policy
	j := ReportJSON{
		Policy:  PolicyJSON{Path: p.Path, SHA256: hex.EncodeToString(p.SHA256[:]), Mode: p.Mode.String()},
		Capture: r.Capture, Frames: r.Frames, MaxSources: r.MaxSources, TrackAfter: r.TrackAfter,
		Rules: []RuleJSON{}, Allow: r.Allow, Deny: r.Deny, Unmatched: r.Unmatched, Malformed: r.Malformed,
		MalformedDropped: r.MalformedDropped, Unparsed: map[string]Counts{}, NonIP: r.NonIP, Banned: r.Banned,
		NoRequest: r.NoRequest, RequestsRecorded: r.RequestsRecorded, NotReplayed: append([]string{}, r.NotReplayed...),
		Bans: []BanEventJSON{}, Top: []SourceDropsJSON{}, Explained: []ExplanationJSON{},
		Short: r.Short, Truncated: r.Truncated, Cut: r.Cut, Backwards: r.Backwards, NoTime: r.NoTime,
		NoLinkLayer: r.NoLinkLayer, Outgoing: r.Outgoing, Warnings: r.Warnings(),
	}
	if j.Warnings == nil {
		j.Warnings = []string{}
	}
	if r.Frames > 0 {
		j.First, j.Last = r.First.UTC().Format(time.RFC3339Nano), r.Last.UTC().Format(time.RFC3339Nano)
	}
	for _, rr := range r.Rules {
		j.Rules = append(j.Rules, RuleJSON{Rule: rr.Name, Line: rr.Line, Pass: rr.Pass, Drop: rr.Drop, Shadow: rr.Shadow,
			SynCookie: rr.Cookie, Reject: rr.Reject, RefusedByLevel: rr.Refused})
	}
	for k, c := range r.Unparsed {
		if c.Packets > 0 {
			j.Unparsed[maps.UnparsedKind(k).String()] = c
		}
	}
	for _, b := range r.Bans {
		j.Bans = append(j.Bans, BanEventJSON{Frame: b.Frame, Start: b.Start.Seconds(), For: b.For.Seconds(),
			Prefix: b.Prefix.String(), Rule: b.Rule, Shadow: b.Shadow})
	}
	for _, s := range r.Top {
		src := ""
		if s.Source.IsValid() {
			src = s.Source.String()
		}
		j.Top = append(j.Top, SourceDropsJSON{Source: src, Rule: s.Rule, Drop: s.Drop, Shadow: s.Shadow,
			SynCookie: s.Cookie, Reject: s.Reject})
	}
	for _, e := range r.Explained {
		d := e.Decision
		ej := ExplanationJSON{Frame: e.Frame, Offset: e.Offset.Seconds(), Length: e.Len, Packet: e.Packet,
			Why: d.Why.String(), Verdict: d.Verdict.String(), Rule: d.Rule, Level: d.Level, Port: d.Port,
			Short: e.Short, Outgoing: e.Outgoing, Text: e.Text}
		if d.Source.IsValid() {
			ej.Key = d.Source.String()
		}
		j.Explained = append(j.Explained, ej)
	}
	if c := r.CutOff; c != nil {
		j.CutOff = &CutOffJSON{Frame: c.Frame, Offset: c.Offset, End: c.End, Compressed: c.Compressed}
	}
	return j
}
