// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/xdplimit/xdplimit/banfeed"
	"github.com/xdplimit/xdplimit/maps"
)

// One source, now: what the limiter holds for an address (maps.Source), as
// JSON. GET /v1/sources/ADDR on the metrics address answers it for every
// interface the address serves, and `xdplimit status --source -o json`
// prints it. docs/json.md documents every field; the names of a level's
// budget are the IETF RateLimit header fields' (limit, remaining, reset)
// and HTTP's Retry-After's.

// Sources is the answer for one address: one report per interface.
type Sources struct {
	Address    string         `json:"address"`
	Interfaces []SourceReport `json:"interfaces"`
}

// SourceReport is what one interface's limiter holds for the address, or
// why it could not be read (Error; nothing else is set then).
type SourceReport struct {
	Interface string `json:"interface"`
	Error     string `json:"error,omitempty"`
	// Port is the port the levels keyed with a port were read for.
	Port uint16 `json:"port,omitempty"`
	// List is "allow" or "deny" when that list decides the address.
	List      string           `json:"list,omitempty"`
	Bans      []BanJSON        `json:"bans"`
	Rules     []SourceRuleJSON `json:"rules"`
	Undecided []string         `json:"undecided"`
}

// SourceRuleJSON is a rule the address can match.
type SourceRuleJSON struct {
	Rule   string            `json:"rule"`
	Index  int               `json:"index"`
	Action string            `json:"action"`
	Levels []SourceLevelJSON `json:"levels"`
}

// SourceLevelJSON is one level's state for the address. Remaining, Reset
// and RetryAfter are null for a key with a port read without one.
type SourceLevelJSON struct {
	Level     int    `json:"level"`
	Key       string `json:"key"`
	Prefix    string `json:"prefix,omitempty"`
	Algorithm string `json:"algorithm"`
	Unit      string `json:"unit"`
	Tracked   bool   `json:"tracked"`
	Sketch    bool   `json:"sketch"`
	Limit     uint64 `json:"limit"`
	// Remaining units now; Reset, seconds until Remaining is Limit again;
	// RetryAfter, seconds until one unit is admitted (0 while Remaining
	// is not).
	Remaining  *uint64  `json:"remaining"`
	Reset      *float64 `json:"reset"`
	RetryAfter *float64 `json:"retry_after"`
}

// BanJSON is a ban as the JSON outputs print it.
type BanJSON struct {
	Prefix      string  `json:"prefix"`
	Origin      string  `json:"origin"`
	Reason      string  `json:"reason"`
	SecondsLeft float64 `json:"seconds_left"`
	Dropped     uint64  `json:"packets_dropped"`
	Shadow      bool    `json:"shadow"`
}

// BansJSON is bans as the JSON outputs print them (never null).
func BansJSON(bans []maps.Ban) []BanJSON {
	out := make([]BanJSON, len(bans))
	for i, b := range bans {
		out[i] = BanJSON{Prefix: b.Prefix.String(), Origin: banfeed.Origin(b), Reason: b.Reason,
			SecondsLeft: b.Left.Seconds(), Dropped: b.Dropped, Shadow: b.Shadow}
	}
	return out
}

// ReportSource reads what the limiter serving iface holds for addr (the
// keys with a port for port, when not 0).
func ReportSource(iface string, l *maps.Limiter, addr netip.Addr, port uint16) SourceReport {
	s, err := l.Source(addr, port)
	if err != nil {
		return SourceReport{Interface: iface, Error: err.Error()}
	}
	return SourceJSON(iface, s)
}

// SourceJSON is s, read from the limiter serving iface, as JSON.
func SourceJSON(iface string, s maps.Source) SourceReport {
	r := SourceReport{Interface: iface}
	r.Port, r.List, r.Bans, r.Undecided = s.Port, s.List, BansJSON(s.Bans), s.Undecided
	if r.Undecided == nil {
		r.Undecided = []string{}
	}
	r.Rules = make([]SourceRuleJSON, 0, len(s.Rules))
	for _, sr := range s.Rules {
		rj := SourceRuleJSON{Rule: sr.Name, Index: sr.Index, Action: sr.Action, Levels: []SourceLevelJSON{}}
		for _, lv := range sr.Levels {
			lj := SourceLevelJSON{Level: lv.Origin, Key: lv.Key, Algorithm: lv.Algorithm, Unit: "packets",
				Tracked: lv.Tracked, Sketch: lv.Sketch, Limit: lv.Limit}
			if lv.Bytes {
				lj.Unit = "bytes"
			}
			if lv.Prefix.IsValid() {
				lj.Prefix = lv.Prefix.String()
			}
			if lv.Known {
				remaining := lv.Remaining
				reset, retry := time.Duration(lv.Reset).Seconds(), time.Duration(lv.RetryAfter).Seconds()
				lj.Remaining, lj.Reset, lj.RetryAfter = &remaining, &reset, &retry
			}
			rj.Levels = append(rj.Levels, lj)
		}
		r.Rules = append(r.Rules, rj)
	}
	return r
}

// parseSource reads the address of /v1/sources/{addr} and its ?port=.
func parseSource(r *http.Request) (netip.Addr, uint16, error) {
	addr, err := netip.ParseAddr(r.PathValue("addr"))
	if err != nil {
		return addr, 0, fmt.Errorf("%q is not an IP address", r.PathValue("addr"))
	}
	var port uint16
	if p := r.URL.Query().Get("port"); p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return addr, 0, fmt.Errorf("port %q: give 1 to 65535", p)
		}
		port = uint16(n)
	}
	return addr.Unmap(), port, nil
}

// sources answers GET /v1/sources/{addr}: the exporter's own interfaces,
// and its peers' when it serves them.
func (e *Exporter) sources(withPeers bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		addr, port, err := parseSource(r)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		out := Sources{Address: addr.String(), Interfaces: []SourceReport{}}
		for _, t := range e.coll.list() {
			out.Interfaces = append(out.Interfaces, ReportSource(t.iface, t.l, addr, port))
		}
		if withPeers {
			ctx, cancel := context.WithTimeout(r.Context(), peerTimeout)
			defer cancel()
			peers := e.listPeers(ctx)
			got := make([][]SourceReport, len(peers))
			var wg sync.WaitGroup
			for i, p := range peers {
				wg.Go(func() {
					reps, err := p.Source(ctx, addr, port)
					if err != nil {
						reps = []SourceReport{{Interface: p.Interface(), Error: err.Error()}}
					}
					got[i] = reps
				})
			}
			wg.Wait()
			for _, reps := range got {
				out.Interfaces = append(out.Interfaces, reps...)
			}
		}
		slices.SortFunc(out.Interfaces, func(a, b SourceReport) int { return strings.Compare(a.Interface, b.Interface) })
		writeJSON(w, http.StatusOK, out)
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// Source implements Peer: the peer's own interfaces' reports.
func (p HTTPPeer) Source(ctx context.Context, addr netip.Addr, port uint16) ([]SourceReport, error) {
	u := p.URL + "/v1/sources/" + url.PathEscape(addr.String())
	if port != 0 {
		u += "?port=" + strconv.Itoa(int(port))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := p.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/v1/sources: %s", resp.Status)
	}
	var s Sources
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&s); err != nil {
		return nil, fmt.Errorf("/v1/sources: %w", err)
	}
	if len(s.Interfaces) == 0 {
		return nil, errors.New("/v1/sources: no interface in the answer")
	}
	return s.Interfaces, nil
}
