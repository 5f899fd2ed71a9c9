// SPDX-License-Identifier: Apache-2.0

package crowdsec

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Defaults of Config's zero fields.
const (
	DefaultInterval     = 10 * time.Second
	DefaultResync       = 10 * time.Minute
	DefaultTimeout      = time.Minute
	DefaultMaxBackoff   = 5 * time.Minute
	DefaultMaxBytes     = 64 << 20
	DefaultMaxDecisions = 1 << 18
)

// Config configures a Bouncer. Zero fields take the defaults above.
type Config struct {
	// URL is the LAPI's base URL, http://127.0.0.1:8080.
	URL string
	// APIKey is the bouncer's key (cscli bouncers add NAME); ReadKeyFile
	// reads it from a file. One key per Bouncer: the LAPI remembers per
	// key when it was last asked, so two bouncers sharing a key would
	// each miss the deltas the other took.
	APIKey string
	// Interval is the time between polls.
	Interval time.Duration
	// Resync is the longest time between full resynchronisations
	// (startup=true). The LAPI's delta answers what was created since
	// the bouncer's last pull began: a decision written while a pull ran
	// is in neither that answer nor any later delta, and only a
	// resynchronisation brings it.
	Resync time.Duration
	// Timeout bounds one request, answer included (a startup answer can
	// be tens of MB).
	Timeout time.Duration
	// MaxBackoff bounds the wait between polls after failures (it doubles
	// from Interval with each failure in a row).
	MaxBackoff time.Duration
	// Types are the decision types applied, default ban; case-insensitive
	// (lower case is what the LAPI has). Any type becomes a ban here:
	// XDP cannot serve a captcha.
	Types []string
	// Scopes are ip, range or both (the default); case-insensitive.
	Scopes []string
	// Origins, when set, admit only decisions of these origins (crowdsec,
	// cscli, cscli-import, CAPI, lists, ...); exact match.
	Origins []string
	// ScenariosContaining, when set, admits only decisions whose scenario
	// contains one of these; ScenariosNotContaining rejects those whose
	// scenario contains one of these. Case-insensitive, as the LAPI does.
	ScenariosContaining, ScenariosNotContaining []string
	// MaxBytes bounds one answer (64 MiB), MaxDecisions its decisions
	// (new and deleted together; 262144). An answer over either is an
	// error and nothing of it is applied.
	MaxBytes     int64
	MaxDecisions int
	// UserAgent is sent with each request as TYPE/VERSION: the LAPI
	// records both (cscli bouncers list) and warns on each request
	// without the slash. Default xdplimit-crowdsec-bouncer/unknown.
	UserAgent string
	// HTTPClient, when set, makes the requests (TLS, proxies); it should
	// refuse redirects, as the default one does, so the key is never sent
	// elsewhere. Timeout still applies, per request.
	HTTPClient *http.Client
	// Log receives the bouncer's messages (nil: none).
	Log *slog.Logger
	// Now is the clock of the last-success time (nil: time.Now).
	Now func() time.Time
}

// filters the LAPI applies itself, as query parameters of the stream.
func (c *Config) query(startup bool) url.Values {
	q := url.Values{}
	q.Set("startup", fmt.Sprint(startup))
	q.Set("scopes", strings.Join(c.Scopes, ","))
	if len(c.Types) == 1 {
		q.Set("type", c.Types[0]) // the LAPI takes one type at most
	}
	for k, v := range map[string][]string{"origins": c.Origins,
		"scenarios_containing":     c.ScenariosContaining,
		"scenarios_not_containing": c.ScenariosNotContaining} {
		if len(v) > 0 {
			q.Set(k, strings.Join(v, ","))
		}
	}
	return q
}

// withDefaults fills in defaults and refuses what cannot work.
func (c Config) withDefaults() (Config, *rules, error) {
	if err := c.checkEndpoint(); err != nil {
		return c, nil, err
	}
	c.fillDefaults()
	if err := c.normaliseLists(); err != nil {
		return c, nil, err
	}
	r, err := c.keepRules()
	if err != nil {
		return c, nil, err
	}
	return c, r, nil
}

// checkEndpoint refuses a URL or an API key no LAPI could take.
func (c *Config) checkEndpoint() error {
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("crowdsec: URL %q: want http(s)://host:port", c.URL)
	}
	if c.APIKey == "" {
		return errors.New("crowdsec: no API key")
	}
	if strings.ContainsFunc(c.APIKey, func(r rune) bool { return r <= ' ' || r > '~' }) {
		return errors.New("crowdsec: the API key has spaces or control characters")
	}
	return nil
}

// fillDefaults sets what is left zero to its default.
func (c *Config) fillDefaults() {
	dur := func(d *time.Duration, def time.Duration) {
		if *d <= 0 {
			*d = def
		}
	}
	dur(&c.Interval, DefaultInterval)
	dur(&c.Resync, DefaultResync)
	dur(&c.Timeout, DefaultTimeout)
	dur(&c.MaxBackoff, DefaultMaxBackoff)
	c.MaxBackoff = max(c.MaxBackoff, c.Interval)
	if c.MaxBytes <= 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.MaxDecisions <= 0 {
		c.MaxDecisions = DefaultMaxDecisions
	}
	// Copies: the lists are normalised next, and the caller's are not
	// ours to change.
	c.Types, c.Scopes = slices.Clone(c.Types), slices.Clone(c.Scopes)
	if len(c.Types) == 0 {
		c.Types = []string{"ban"}
	}
	if len(c.Scopes) == 0 {
		c.Scopes = []string{"ip", "range"}
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.UserAgent == "" {
		c.UserAgent = "xdplimit-crowdsec-bouncer/unknown"
	}
}

// normaliseLists refuses a filter value the LAPI would misread and lowers
// the case of types and scopes.
func (c *Config) normaliseLists() error {
	// The LAPI splits its filters on commas: a comma inside one value
	// would silently become two.
	lists := []struct {
		name string
		v    *[]string
	}{{"type", &c.Types}, {"scope", &c.Scopes}, {"origin", &c.Origins},
		{"scenario filter", &c.ScenariosContaining}, {"scenario filter", &c.ScenariosNotContaining}}
	for _, l := range lists {
		for i, s := range *l.v {
			if s == "" || strings.ContainsAny(s, ",") || strings.ContainsFunc(s, func(r rune) bool { return r < ' ' }) {
				return fmt.Errorf("crowdsec: %s %q: empty, or has a comma or a control character", l.name, s)
			}
			// The LAPI compares types exactly, and its own are lower
			// case (ban, captcha, throttle).
			if l.v == &c.Scopes || l.v == &c.Types {
				(*l.v)[i] = strings.ToLower(s)
			}
		}
	}
	return nil
}

// keepRules is what a decision must be to be kept, from the normalised lists.
func (c *Config) keepRules() (*rules, error) {
	r := &rules{types: map[string]bool{}, scopes: map[string]bool{}}
	for _, t := range c.Types {
		r.types[t] = true
	}
	for _, s := range c.Scopes {
		if s != "ip" && s != "range" {
			return nil, fmt.Errorf("crowdsec: scope %q: only ip and range can be banned", s)
		}
		r.scopes[s] = true
	}
	if len(c.Origins) > 0 {
		r.origins = map[string]bool{}
		for _, o := range c.Origins {
			r.origins[o] = true
		}
	}
	for _, s := range c.ScenariosContaining {
		r.containing = append(r.containing, strings.ToLower(s))
	}
	for _, s := range c.ScenariosNotContaining {
		r.without = append(r.without, strings.ToLower(s))
	}
	return r, nil
}

// maxKeyFile bounds a key file: a key is 32 characters.
const maxKeyFile = 4096

// ReadKeyFile reads a bouncer's API key from a file: one line, trimmed.
// It refuses a file that group or others may read (the key lets anyone
// read every decision), an empty one, and anything but a regular file
// (a FIFO would block the open; O_NONBLOCK and the check on the open
// descriptor keep that from hanging the caller).
func ReadKeyFile(path string) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", fmt.Errorf("crowdsec key file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("crowdsec key file: %w", err)
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("crowdsec key file %s is not a regular file", path)
	}
	if perm := st.Mode().Perm(); perm&0o044 != 0 {
		return "", fmt.Errorf("crowdsec key file %s is readable by group or others (mode %04o): chmod 600 it", path, perm)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return "", fmt.Errorf("crowdsec key file: %w", err)
	}
	if len(b) > maxKeyFile {
		return "", fmt.Errorf("crowdsec key file %s is larger than %d bytes: not a key", path, maxKeyFile)
	}
	key := strings.TrimSpace(string(b))
	if key == "" {
		return "", fmt.Errorf("crowdsec key file %s is empty", path)
	}
	if strings.ContainsFunc(key, func(r rune) bool { return r <= ' ' || r > '~' }) {
		return "", fmt.Errorf("crowdsec key file %s holds more than one word, or control characters", path)
	}
	return key, nil
}
