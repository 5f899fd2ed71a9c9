// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"
)

// CrowdSec is the crowdsec: section: a CrowdSec Local API whose decisions
// the attach process applies as bans (docs/crowdsec.md). The bans it makes
// obey the bans: section like every ban from outside.
type CrowdSec struct {
	// URL is the LAPI's base URL, http(s)://host:port.
	URL string
	// APIKeyFile holds the bouncer's key (cscli bouncers add NAME), readable
	// by its owner only. The key itself is never part of a Policy.
	APIKeyFile string
	// Interval is the time between polls of the decision stream; Resync
	// the longest between full resynchronisations (crowdsec.Config).
	Interval, Resync time.Duration
	// Types are the decision types applied (lower case; default ban);
	// Scopes the scopes, ip and range (default both).
	Types, Scopes []string
	// Origins, when set, admit only decisions of these origins (crowdsec,
	// cscli, CAPI, lists, ...): exact match.
	Origins []string
	// ScenariosContaining, when set, admits only decisions whose scenario
	// contains one of these; ScenariosNotContaining rejects those whose
	// scenario contains one of these (case-insensitive).
	ScenariosContaining, ScenariosNotContaining []string
}

// Defaults and bounds of the crowdsec: section.
const (
	DefaultCrowdSecInterval = 10 * time.Second
	MinCrowdSecInterval     = time.Second
	MaxCrowdSecInterval     = time.Hour
	DefaultCrowdSecResync   = 10 * time.Minute
	MaxCrowdSecResync       = 24 * time.Hour
)

// String renders the section as `policy check` prints it.
func (c *CrowdSec) String() string {
	s := fmt.Sprintf("LAPI %s, key from %s, every %s, resynchronised every %s; types %s, scopes %s", c.URL,
		c.APIKeyFile, formatDuration(c.Interval), formatDuration(c.Resync), strings.Join(c.Types, ","),
		strings.Join(c.Scopes, ","))
	for _, f := range []struct {
		name string
		v    []string
	}{{"origins", c.Origins}, {"scenarios containing", c.ScenariosContaining},
		{"scenarios not containing", c.ScenariosNotContaining}} {
		if len(f.v) > 0 {
			s += fmt.Sprintf("; %s %s", f.name, strings.Join(f.v, ","))
		}
	}
	return s
}

// crowdsec decodes the top-level crowdsec: section.
func (d *decoder) crowdsec(f field) *CrowdSec {
	if isNull(f.value) {
		return nil
	}
	m := d.mapping(f.value, "crowdsec", "url", "api_key_file", "interval", "resync", "types", "scopes", "origins",
		"scenarios_containing", "scenarios_not_containing")
	if m == nil {
		return nil
	}
	before := len(d.errs)
	c := &CrowdSec{Interval: DefaultCrowdSecInterval, Resync: DefaultCrowdSecResync, Types: []string{"ban"},
		Scopes: []string{"ip", "range"}}
	if uf, ok := m["url"]; ok {
		if s, ok := d.scalar(uf.value, "crowdsec.url", "a URL"); ok {
			if err := checkLAPIURL(s); err != nil {
				d.errorf(uf.value, "crowdsec.url", "%v", err)
			}
			c.URL = s
		}
	} else {
		d.errorf(f.value, "crowdsec", "url is required: the Local API's, e.g. url: http://127.0.0.1:8080")
	}
	if kf, ok := m["api_key_file"]; ok {
		if s, ok := d.scalar(kf.value, "crowdsec.api_key_file", "a file path"); ok {
			c.APIKeyFile = d.resolve(s)
		}
	} else {
		d.errorf(f.value, "crowdsec", "api_key_file is required: a file holding the key `cscli bouncers add NAME` printed")
	}
	if vf, ok := m["interval"]; ok {
		d.boundedDuration(vf.value, "crowdsec.interval", "10s", MinCrowdSecInterval, MaxCrowdSecInterval, &c.Interval)
	}
	if rf, ok := m["resync"]; ok {
		d.boundedDuration(rf.value, "crowdsec.resync", "10m", MinCrowdSecInterval, MaxCrowdSecResync, &c.Resync)
	}
	d.crowdsecFilters(m, c)
	if len(d.errs) != before {
		return nil
	}
	return c
}

// crowdsecFilters decodes the lists that filter the decision stream, each
// value a word the LAPI can take in its comma-separated query.
func (d *decoder) crowdsecFilters(m map[string]field, c *CrowdSec) {
	lists := []struct {
		name  string
		dst   *[]string
		lower bool
		only  []string // the values allowed, when only some are
	}{
		{"types", &c.Types, true, nil},
		{"scopes", &c.Scopes, true, []string{"ip", "range"}},
		{"origins", &c.Origins, false, nil},
		{"scenarios_containing", &c.ScenariosContaining, false, nil},
		{"scenarios_not_containing", &c.ScenariosNotContaining, false, nil},
	}
	for _, l := range lists {
		lf, ok := m[l.name]
		if !ok {
			continue
		}
		path := join("crowdsec", l.name)
		var vs []string
		for i, e := range d.sequence(lf.value, path, "[a, b]") {
			s, ok := d.scalar(e, index(path, i), "a word")
			if !ok {
				continue
			}
			if l.lower {
				s = strings.ToLower(s)
			}
			switch {
			case s == "" || strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r == ',' || r == 0x7f }):
				// The LAPI splits its filters on commas.
				d.errorf(e, index(path, i), "%q: empty, or holds a comma or a control character", s)
			case l.only != nil && !slices.Contains(l.only, s):
				d.errorf(e, index(path, i), "scope %q: only ip and range can be banned", s)
			default:
				vs = append(vs, s)
			}
		}
		*l.dst = vs
	}
}

// checkLAPIURL accepts http(s)://host:port[/path], without credentials,
// query or fragment: the key travels in a header, from api_key_file.
func checkLAPIURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("LAPI URL %q: %v", s, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("LAPI URL %q: the scheme must be http:// or https://", s)
	case u.Host == "" || u.Hostname() == "":
		return fmt.Errorf("LAPI URL %q: expected http://host:port", s)
	case u.User != nil:
		return fmt.Errorf("LAPI URL %q holds credentials: the bouncer's key goes in api_key_file", redactURL(u))
	case u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("LAPI URL %q: options are not taken from the URL; use the crowdsec: fields", s)
	}
	return nil
}
