// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"
)

// Scope says who shares a limit. The zero Scope is ScopeHost.
type Scope uint8

const (
	ScopeHost  Scope = iota // each host enforces the limit on its own traffic
	ScopeFleet              // the hosts of the fleet: section share one limit through Redis
)

var scopeNames = []string{"host", "fleet"}

func (s Scope) String() string { return enumString(int(s), scopeNames) }

// suffix is what Limit.String appends: nothing for the default scope.
func (s Scope) suffix() string {
	if s == ScopeHost {
		return ""
	}
	return " scope " + s.String()
}

// Fallback is what fleet levels do while Redis cannot be reached.
type Fallback uint8

const (
	// FallbackLocal: each host enforces the whole fleet limit on its own.
	FallbackLocal Fallback = iota
	// FallbackShare: each host enforces the limit divided by the number of
	// live hosts Redis last reported.
	FallbackShare
)

var fallbackNames = []string{"local", "share"}

func (f Fallback) String() string { return enumString(int(f), fallbackNames) }

// Fleet is the policy's fleet: section: where the hosts that share fleet
// limits meet, and how often they exchange what they admitted.
type Fleet struct {
	// Redis holds one or more redis:// or rediss:// (TLS) URLs: one server,
	// or seed nodes of a Redis Cluster. No URL holds a password.
	Redis   []string
	Cluster bool
	// PasswordFile, when set, holds the password (its first line); else
	// the REDIS_PASSWORD environment variable does, if set. The password
	// itself is never part of a Policy, so it is never printed.
	PasswordFile string
	// Namespace prefixes every key, so that several fleets share one Redis.
	Namespace string
	Sync      time.Duration
	Fallback  Fallback
	// DebtHorizon bounds how long a token bucket's fleet debt, as Redis
	// reports it, can keep a key from admitting: whoever can write the
	// fleet's keys can stall a key this long and no longer.
	DebtHorizon time.Duration
	// Share keeps the keys of token buckets within each host's local
	// share out of the exchange.
	Share FleetShare
}

const (
	DefaultFleetSync = 100 * time.Millisecond
	MinFleetSync     = 10 * time.Millisecond
	MaxFleetSync     = 10 * time.Second

	DefaultDebtHorizon = 10 * time.Minute
	MinDebtHorizon     = time.Second
	MaxDebtHorizon     = 24 * time.Hour
)

var namespaceRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// fleet decodes the fleet: section.
func (d *decoder) fleet(f field) *Fleet {
	if isNull(f.value) {
		return nil
	}
	m := d.mapping(f.value, "fleet", "redis", "cluster", "password_file", "namespace", "sync", "fallback", "debt_horizon",
		"share", "report_at", "share_hold")
	if m == nil {
		return nil
	}
	fl := &Fleet{Sync: DefaultFleetSync, DebtHorizon: DefaultDebtHorizon, Share: defaultFleetShare()}
	before := len(d.errs)
	if rf, ok := m["redis"]; ok {
		for _, u := range d.stringOrList(rf.value, "fleet.redis") {
			if err := checkRedisURL(u.s); err != nil {
				d.errorf(u.node, "fleet.redis", "%v", err)
				continue
			}
			fl.Redis = append(fl.Redis, u.s)
		}
	} else {
		d.errorf(f.value, "fleet", "redis is required: the Redis URL the fleet shares, e.g. redis: redis://10.0.0.5:6379/0")
	}
	if cf, ok := m["cluster"]; ok {
		if s, ok := d.scalar(cf.value, "fleet.cluster", "true or false"); ok {
			b, err := strconv.ParseBool(s)
			if err != nil {
				d.errorf(cf.value, "fleet.cluster", "expected true or false, got %q", s)
			}
			fl.Cluster = b
		}
	}
	if !fl.Cluster && len(fl.Redis) > 1 {
		d.errorf(m["redis"].value, "fleet.redis", "several URLs are seed nodes of a Redis Cluster: add cluster: true")
	}
	if pf, ok := m["password_file"]; ok {
		if s, ok := d.scalar(pf.value, "fleet.password_file", "a file path"); ok {
			fl.PasswordFile = d.resolve(s)
		}
	}
	if nf, ok := m["namespace"]; ok {
		if s, ok := d.scalar(nf.value, "fleet.namespace", "a name"); ok {
			if !namespaceRE.MatchString(s) {
				d.errorf(nf.value, "fleet.namespace", "namespace %q: 1-64 letters, digits, '_', '.', '-', starting with a letter or digit", s)
			}
			fl.Namespace = s
		}
	} else {
		fl.Namespace = "default"
	}
	if sf, ok := m["sync"]; ok {
		d.boundedDuration(sf.value, "fleet.sync", "100ms", MinFleetSync, MaxFleetSync, &fl.Sync)
	}
	if hf, ok := m["debt_horizon"]; ok {
		d.boundedDuration(hf.value, "fleet.debt_horizon", "10m", MinDebtHorizon, MaxDebtHorizon, &fl.DebtHorizon)
	}
	if ff, ok := m["fallback"]; ok {
		if v, ok := d.enum(ff.value, "fleet.fallback", "fallback", fallbackNames); ok {
			fl.Fallback = Fallback(v)
		}
	}
	d.fleetShare(m, fl)
	if len(d.errs) != before {
		return nil
	}
	return fl
}

// boundedDuration reads a duration from lo to hi into *v; example is one.
func (d *decoder) boundedDuration(n ast.Node, field, example string, lo, hi time.Duration, v *time.Duration) {
	s, ok := d.scalar(n, field, "a duration like "+example)
	if !ok {
		return
	}
	name := lastElem(field)
	x, err := time.ParseDuration(s)
	switch {
	case err != nil:
		d.errorf(n, field, "expected a duration like %s, got %q", example, s)
	case x < lo || x > hi:
		d.errorf(n, field, "%s must be %s to %s, got %s", name, lo, hi, s)
	default:
		*v = x
	}
}

// lastElem is the last element of a dotted field path ("hold" of
// "conversations.arm.hold"): how a value's own message names it.
func lastElem(field string) string {
	return field[strings.LastIndexByte(field, '.')+1:]
}

// checkRedisURL accepts redis://host:port[/db] and rediss://..., with an
// optional user name but no password: a password in the policy file would
// end up in logs, backups and `policy check` output.
func checkRedisURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("redis URL %q: %v", s, err)
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return fmt.Errorf("redis URL %q: the scheme must be redis:// or rediss:// (TLS)", s)
	}
	if _, set := u.User.Password(); set {
		return fmt.Errorf("redis URL %q holds a password: put it in password_file or the REDIS_PASSWORD environment variable", redactURL(u))
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil || host == "" {
		return fmt.Errorf("redis URL %q: expected host:port, e.g. redis://10.0.0.5:6379/0", s)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("redis URL %q: port %q is not 1 to 65535", s, port)
	}
	if db := strings.TrimPrefix(u.Path, "/"); db != "" {
		if n, err := strconv.Atoi(db); err != nil || n < 0 || n > 15 {
			return fmt.Errorf("redis URL %q: the database %q is not 0 to 15", s, db)
		}
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("redis URL %q: options are not taken from the URL; use the fleet: fields", s)
	}
	return nil
}

func redactURL(u *url.URL) string {
	c := *u
	c.User = url.User(u.User.Username())
	return c.String()
}

// resolve makes a relative path relative to the policy file's directory.
func (d *decoder) resolve(path string) string {
	if filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(d.dir, path)
}

// scope decodes a limit's scope field.
func (d *decoder) scope(f field, path string, alg Algorithm) Scope {
	v, ok := d.enum(f.value, path, "scope", scopeNames)
	if !ok {
		return ScopeHost
	}
	s := Scope(v)
	if s == ScopeFleet {
		if alg != TokenBucket && alg != FixedWindow {
			d.errorf(f.value, path, "scope: fleet works with token_bucket and fixed_window, not %s", alg)
			return ScopeHost
		}
		d.fleetScopes = append(d.fleetScopes, posString{path, f.value})
	}
	return s
}

// checkFleet reports every fleet-scoped limit of a policy without a fleet:
// section, at the limit's scope.
func (d *decoder) checkFleet(p *Policy) {
	if p.Fleet != nil {
		return
	}
	seen := map[ast.Node]bool{}
	for _, sc := range d.fleetScopes {
		if !seen[sc.node] { // an anchor's limit is decoded at every alias
			seen[sc.node] = true
			d.errorf(sc.node, sc.s, "scope: fleet needs a fleet: section (the Redis the hosts share)")
		}
	}
}

type posString struct {
	s    string
	node ast.Node
}

// stringOrList decodes a scalar or a sequence of scalars.
func (d *decoder) stringOrList(n ast.Node, path string) []posString {
	n = d.deref(n, path)
	if seq, ok := n.(*ast.SequenceNode); ok {
		var out []posString
		for i, v := range seq.Values {
			if s, ok := d.scalar(v, index(path, i), "a URL"); ok {
				out = append(out, posString{s, v})
			}
		}
		if len(out) == 0 {
			d.errorf(n, path, "give at least one URL")
		}
		return out
	}
	if s, ok := d.scalar(n, path, "a URL"); ok {
		return []posString{{s, n}}
	}
	return nil
}

// bound states what a fleet level admits, for `policy check`: the exchange
// lags by at most one sync, so each host may admit up to one sync interval's
// worth of the limit before it hears of the others' admissions.
func (f *Fleet) bound(l Limit) string {
	secs := f.Sync.Seconds()
	switch l.Algorithm {
	case TokenBucket:
		perSync := float64(l.Count) / l.Per.Seconds() * secs
		return fmt.Sprintf("fleet bound: over any time t the fleet admits at most %d + rate x t + N x %.0f %s "+
			"(N hosts, each up to one sync of rate ahead)%s; one host alone may use the whole limit",
			l.Burst, perSync, l.Unit.short(), f.Share.shareBound(l.Burst))
	case FixedWindow:
		return fmt.Sprintf("fleet bound: %d %s per window for the fleet once its live hosts are known (each opens a "+
			"window holding the others' share until they report it); one host alone gets the whole limit after "+
			"two syncs; windows follow the hosts' wall clocks", l.Count, l.Unit.short())
	}
	return ""
}
