// SPDX-License-Identifier: Apache-2.0

package banfeed

import (
	"fmt"
	"hash/maphash"
	"sort"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xdplimit/xdplimit/internal/termsafe"
	"github.com/xdplimit/xdplimit/maps"
)

// Bounds a source can reach, the limit label of
// xdplimit_bans_import_limited_total.
const (
	LimitPerSync = "per_sync" // bans.max_per_sync: the rest wait for the next sync
	LimitTotal   = "total"    // bans.max_imported, or half the ban table
	LimitRead    = "read"     // the source holds more than a sync reads
)

// Metrics are one source's xdplimit_bans_* series of an interface. Every
// source registers the same families; the source label tells them apart.
type Metrics struct {
	refused  *prometheus.CounterVec
	escaped  prometheus.Counter
	imported prometheus.Gauge
	limited  *prometheus.CounterVec
}

// NewMetrics makes the series of source on iface.
func NewMetrics(source, iface string) *Metrics {
	l := prometheus.Labels{"interface": iface, "source": source}
	m := &Metrics{
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xdplimit_bans_refused_total", ConstLabels: l,
			Help: "Bans from outside refused, each counted once, by reason: malformed, too_wide, expired, too_long, datapath."},
			[]string{"reason"}),
		escaped: prometheus.NewCounter(prometheus.CounterOpts{Name: "xdplimit_bans_escaped_total", ConstLabels: l,
			Help: "Bans from outside applied with their origin or reason escaped: they held characters a terminal acts on."}),
		imported: prometheus.NewGauge(prometheus.GaugeOpts{Name: "xdplimit_bans_imported", ConstLabels: l,
			Help: "Bans from this source in the ban table at the last sync."}),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xdplimit_bans_import_limited_total", ConstLabels: l,
			Help: "Syncs that reached a bound on bans from outside: per_sync (bans.max_per_sync), total (bans.max_imported or half the table), read (more entries than one sync reads)."},
			[]string{"limit"}),
	}
	for _, k := range Kinds {
		m.refused.WithLabelValues(string(k))
	}
	for _, b := range []string{LimitPerSync, LimitTotal, LimitRead} {
		m.limited.WithLabelValues(b)
	}
	return m
}

// Collectors are the series, for the collector of whatever runs the
// source (fleet.Metrics) to describe and collect with its own.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.refused, m.escaped, m.imported, m.limited}
}

// maxSeen bounds the refusals a gate remembers (16 bytes each, with the
// map's overhead under 2 MiB): past it the memory starts over, and an entry
// refused again is counted and logged again.
const maxSeen = 1 << 16

// Gate is one source's gate on one interface: it counts what Check and the
// datapath refuse, each entry once, logs at most one line per kind and
// round for the new ones, and hands out each round's budget.
type Gate struct {
	source string
	m      *Metrics
	logf   func(format string, args ...any)

	mu      sync.Mutex
	seed    maphash.Seed
	seen    map[uint64]struct{}
	round   map[Kind]*firstOf // this round's new refusals, by kind
	escaped *firstOf
	limited map[string]bool // bounds the last round reached
}

type firstOf struct {
	what, why string
	more      int
}

// NewGate makes the gate of source, counting into m and logging with logf.
func NewGate(source string, m *Metrics, logf func(format string, args ...any)) *Gate {
	return &Gate{source: source, m: m, logf: logf, seed: maphash.MakeSeed(),
		seen: map[uint64]struct{}{}, round: map[Kind]*firstOf{}, limited: map[string]bool{}}
}

// Refuse records that the entry id (as the source holds it: the fleet's
// field and value) was refused as k. what names it in the log (escaped
// here), why says what was wrong. An entry refused before, and remembered,
// is neither counted nor logged again. Expired entries are counted and not
// logged: in a busy fleet bans end every second, and the source removes
// them.
func (g *Gate) Refuse(id string, k Kind, what, why string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	h := maphash.String(g.seed, string(k)+"\x00"+id)
	if _, ok := g.seen[h]; ok {
		return
	}
	if len(g.seen) >= maxSeen {
		g.seen = map[uint64]struct{}{}
	}
	g.seen[h] = struct{}{}
	g.refuse(1, k, what, why)
}

// RefuseAll records n refusals of entries the source cannot name one by
// one (it deleted them already, unread): counted and logged as one.
func (g *Gate) RefuseAll(n int, k Kind, what, why string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.refuse(n, k, what, why)
}

func (g *Gate) refuse(n int, k Kind, what, why string) {
	g.m.refused.WithLabelValues(string(k)).Add(float64(n))
	if k == Expired {
		return // bans end all the time: counted, not logged
	}
	f := g.round[k]
	note(&f, what, why)
	g.round[k] = f
}

// Escaped records that a ban applied had its origin or reason escaped.
func (g *Gate) Escaped(what string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.m.escaped.Inc()
	note(&g.escaped, what, "")
}

func note(f **firstOf, what, why string) {
	if *f == nil {
		*f = &firstOf{what: what, why: why}
		return
	}
	(*f).more++
}

// Limited records that this round reached bound (one of the Limit
// constants): counted every time, logged when it was not reached before.
func (g *Gate) Limited(bound, detail string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.m.limited.WithLabelValues(bound).Inc()
	if !g.limited[bound] {
		g.logf("%s: bans: %s", g.source, detail)
	}
	g.limited[bound] = true
}

// Round is one sync's budget of bans: at most MaxPerSync applied, and
// held plus new at most the total bound.
type Round struct {
	g              *Gate
	perSync, total int
	applied, added int
	held           int
	hit            map[string]bool
}

// Begin starts a round for a source that holds held bans now, with the
// limits lim and a ban table of capacity slots: the total bound is
// lim.MaxImported, and at most half the table, so that imported bans
// cannot crowd out the rules' own.
func (g *Gate) Begin(held int, lim maps.BanLimits, capacity uint32) *Round {
	g.m.imported.Set(float64(held))
	return &Round{g: g, perSync: lim.MaxPerSync, total: min(lim.MaxImported, int(capacity/2)), held: held,
		hit: map[string]bool{}}
}

// Admit asks for one ban: added is true for a ban of a prefix the table
// does not hold yet (it counts towards the total), false for one that
// renews a ban held. False means a bound is reached: leave it for a later
// sync.
func (r *Round) Admit(added bool) bool {
	if r.applied >= r.perSync {
		r.hit[LimitPerSync] = true
		return false
	}
	if added && r.held+r.added >= r.total {
		r.hit[LimitTotal] = true
		return false
	}
	r.applied++
	if added {
		r.added++
	}
	return true
}

// Undo gives back the total bound's share of an admitted ban the datapath
// then refused (it is not held).
func (r *Round) Undo(added bool) {
	if added {
		r.added--
	}
}

// End counts the bounds the round reached and logs what it refused: one
// line per kind, naming the first entry and how many more.
func (r *Round) End() {
	g := r.g
	for _, b := range []string{LimitPerSync, LimitTotal} {
		switch {
		case r.hit[b] && b == LimitPerSync:
			g.Limited(b, fmt.Sprintf("applied %d this sync, bans.max_per_sync; the rest wait for the next syncs", r.perSync))
		case r.hit[b]:
			g.Limited(b, fmt.Sprintf("holding %d, the most bans.max_imported and the table allow; the rest wait until some end", r.total))
		default:
			g.Clear(b)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	kinds := make([]Kind, 0, len(g.round))
	for k := range g.round {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool { return kinds[i] < kinds[j] })
	for _, k := range kinds {
		f := g.round[k]
		g.logf("%s: refused %s (%s: %s)%s", g.source, termsafe.Escape(f.what), k, f.why, andMore(f.more, "refused as "+string(k)))
	}
	g.round = map[Kind]*firstOf{}
	if f := g.escaped; f != nil {
		g.logf("%s: the ban of %s came with control characters in its origin or reason: stored escaped%s",
			g.source, termsafe.Escape(f.what), andMore(f.more, "escaped"))
		g.escaped = nil
	}
	g.m.imported.Set(float64(r.held + r.added))
}

// Clear notes that bound was not reached this round (logged once, when it
// was before).
func (g *Gate) Clear(bound string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.limited[bound] {
		g.logf("%s: bans: under the %s bound again", g.source, bound)
	}
	delete(g.limited, bound)
}

func andMore(n int, what string) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("; %d more %s this sync", n, what)
}
