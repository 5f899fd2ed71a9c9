// SPDX-License-Identifier: Apache-2.0

package crowdsec

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xdplimit/xdplimit/banfeed"
	"github.com/xdplimit/xdplimit/maps"
)

// fakeTable is an in-memory ban table with maps.Limiter's contract: BanAll
// checks each request as the real one does (maps.CheckBan) and sets a
// prefix's end and reason; UnbanAll ends exact prefixes. It also checks
// what a Table promises: canonical prefixes only.
type fakeTable struct {
	t        testing.TB
	mu       sync.Mutex
	bans     map[netip.Prefix]maps.Ban // Left is unused: ends holds the end
	ends     map[netip.Prefix]time.Time
	lim      maps.BanLimits
	capacity uint32
	failBan  map[netip.Prefix]bool
	calls    int // BanAll and UnbanAll calls
	lookup   bool
}

func (f *fakeTable) Bans() ([]maps.Ban, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	var out []maps.Ban
	for p, b := range f.bans {
		if left := f.ends[p].Sub(now); left > 0 {
			b.Left = left
			out = append(out, b)
		}
	}
	return out, nil
}

func (f *fakeTable) BanAll(reqs []maps.BanRequest) ([]maps.BanResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	res := make([]maps.BanResult, len(reqs))
	for i, r := range reqs {
		if r.Prefix != maps.CanonicalBanPrefix(r.Prefix) {
			f.t.Errorf("ban of %v: not canonical", r.Prefix)
		}
		if res[i].Err = maps.CheckBan(r.Prefix, r.For, r.Reason); res[i].Err != nil {
			f.t.Errorf("ban %+v: %v", r, res[i].Err)
			continue
		}
		if f.failBan[r.Prefix] {
			res[i].Err = fmt.Errorf("injected failure for %v", r.Prefix)
			continue
		}
		f.bans[r.Prefix] = maps.Ban{Prefix: r.Prefix, Origin: maps.OriginManual, Reason: r.Reason}
		f.ends[r.Prefix] = time.Now().Add(r.For)
	}
	return res, nil
}

func (f *fakeTable) UnbanAll(ps []netip.Prefix) ([]bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	ended := make([]bool, len(ps))
	for i, p := range ps {
		_, ended[i] = f.bans[p]
		delete(f.bans, p)
		delete(f.ends, p)
	}
	return ended, nil
}

func (f *fakeTable) BanLookupOn() (bool, error) { return f.lookup, nil }
func (f *fakeTable) EnableBanLookup() error     { f.lookup = true; return nil }
func (f *fakeTable) BanLimits() (maps.BanLimits, error) {
	return f.lim, nil
}
func (f *fakeTable) BansCapacity() uint32 { return f.capacity }

// fakeTarget is the daemon's Target, a Table, over a fakeTable, with the
// gate's metrics and log.
type fakeTarget struct {
	*Table
	*fakeTable
	metrics *banfeed.Metrics
	gateLog *logBuffer
}

func newFakeTarget(t testing.TB) *fakeTarget {
	ft := &fakeTable{t: t, bans: map[netip.Prefix]maps.Ban{}, ends: map[netip.Prefix]time.Time{},
		failBan: map[netip.Prefix]bool{}, capacity: 1 << 16}
	m := banfeed.NewMetrics(Source, "test0")
	logs := &logBuffer{}
	gate := banfeed.NewGate(Source, m, func(format string, args ...any) { fmt.Fprintf(logs, format+"\n", args...) })
	return &fakeTarget{Table: NewTable(ft, gate, nil), fakeTable: ft, metrics: m, gateLog: logs}
}

// limits sets the limits of the policy in force.
func (f *fakeTarget) limits(l maps.BanLimits) {
	f.fakeTable.mu.Lock()
	defer f.fakeTable.mu.Unlock()
	l.Set = true
	f.lim = l
}

// refused is xdplimit_bans_refused_total{reason=k} of the gate.
func (f *fakeTarget) refused(t testing.TB, k banfeed.Kind) int {
	t.Helper()
	reg := prometheus.NewRegistry()
	for _, c := range f.metrics.Collectors() {
		reg.MustRegister(c)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "xdplimit_bans_refused_total" {
			continue
		}
		for _, m := range mf.Metric {
			for _, l := range m.Label {
				if l.GetName() == "reason" && l.GetValue() == string(k) {
					return int(m.Counter.GetValue())
				}
			}
		}
	}
	return 0
}

// held is the banned prefixes, sorted, as strings.
func (f *fakeTarget) held() []string {
	bans, _ := f.Bans()
	var out []string
	for _, b := range bans {
		out = append(out, b.Prefix.String())
	}
	sort.Strings(out)
	return out
}

func (f *fakeTarget) ban(p string) (maps.Ban, bool) {
	bans, _ := f.Bans()
	for _, b := range bans {
		if b.Prefix.String() == p {
			return b, true
		}
	}
	return maps.Ban{}, false
}

// set writes a ban as another writer would (by hand, a rule, the fleet).
func (f *fakeTarget) set(p string, d time.Duration, reason string) {
	f.fakeTable.mu.Lock()
	defer f.fakeTable.mu.Unlock()
	pp := netip.MustParsePrefix(p)
	f.bans[pp] = maps.Ban{Prefix: pp, Origin: maps.OriginManual, Reason: reason}
	f.ends[pp] = time.Now().Add(d)
}

func (f *fakeTarget) tableCalls() int {
	f.fakeTable.mu.Lock()
	defer f.fakeTable.mu.Unlock()
	return f.calls
}

// logBuffer is a slog text handler's output, safe to read while the
// bouncer writes.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// mustPoll polls once and fails the test on error.
func mustPoll(t *testing.T, b *Bouncer) PollResult {
	t.Helper()
	res, err := b.Poll(context.Background())
	if err != nil {
		t.Fatalf("poll: %v", err)
	}
	return res
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// reasonOf is the reason Table stores for a decision.
func reasonOf(origin, scenario, typ string, id int64) string {
	r, _ := banfeed.Reason(Source, origin+"/"+scenario, fmt.Sprintf("%s %d", typ, id))
	return r
}

func hasReasonPrefix(b maps.Ban, origin, scenario string) bool {
	return strings.HasPrefix(b.Reason, Source+": "+origin+"/"+scenario+": ")
}
