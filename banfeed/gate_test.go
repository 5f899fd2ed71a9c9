// SPDX-License-Identifier: Apache-2.0

package banfeed

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/xdplimit/xdplimit/maps"
)

type logLines []string

func (l *logLines) logf(format string, args ...any) { *l = append(*l, fmt.Sprintf(format, args...)) }

// Each refused entry is counted once however many rounds offer it again,
// and each round logs at most one line per kind, naming the first entry.
func TestGateRefusesOnce(t *testing.T) {
	var log logLines
	m := NewMetrics("fleet", "eth0")
	g := NewGate("fleet", m, log.logf)
	for range 3 {
		r := g.Begin(0, defaults, 1<<16)
		g.Refuse("0.0.0.0/0\x001|o|r", TooWide, "0.0.0.0/0", "wider than /8")
		g.Refuse("::/0\x001|o|r", TooWide, "::/0", "wider than /32")
		g.Refuse("bogus\x1b[2J\x00x", Malformed, "bogus\x1b[2J", "not a prefix")
		r.End()
	}
	want := []string{
		`fleet: refused bogus\x1b[2J (malformed: not a prefix)`,
		"fleet: refused 0.0.0.0/0 (too_wide: wider than /8); 1 more refused as too_wide this sync",
	}
	if strings.Join(log, "\n") != strings.Join(want, "\n") {
		t.Fatalf("logged:\n%s\nwant:\n%s", strings.Join(log, "\n"), strings.Join(want, "\n"))
	}
	for k, n := range map[Kind]float64{TooWide: 2, Malformed: 1, Expired: 0} {
		if got := value(m.refused.WithLabelValues(string(k))); got != n {
			t.Errorf("refused %s: %v, want %v", k, got, n)
		}
	}
}

// A round admits at most max_per_sync bans, and new ones only up to the
// total bound (max_imported, at most half the table); reaching a bound is
// counted every round and logged when it starts and when it ends.
func TestGateBounds(t *testing.T) {
	var log logLines
	m := NewMetrics("fleet", "eth0")
	g := NewGate("fleet", m, log.logf)
	lim := maps.BanLimits{MaxImported: 5, MaxPerSync: 3, Set: true}
	admitted := func(r *Round, added ...bool) (n int) {
		for _, a := range added {
			if r.Admit(a) {
				n++
			}
		}
		return n
	}
	r := g.Begin(0, lim, 1<<16)
	if n := admitted(r, true, true, false, true); n != 3 {
		t.Fatalf("per sync: admitted %d, want 3", n)
	}
	r.End()
	r = g.Begin(3, lim, 1<<16)
	if n := admitted(r, true, true, true, false); n != 3 {
		t.Fatalf("total: admitted %d, want 3 (2 new, 1 renewal)", n)
	}
	r.End()
	if got := value(m.imported); got != 5 {
		t.Errorf("imported %v, want 5", got)
	}
	// Half the table is the bound when smaller: 16 slots hold 8.
	r = g.Begin(7, maps.BanLimits{MaxImported: 100, MaxPerSync: 100}, 16)
	if n := admitted(r, true, true); n != 1 {
		t.Fatalf("half the table: admitted %d, want 1", n)
	}
	r.End()
	r = g.Begin(0, lim, 1<<16)
	r.End()
	for b, n := range map[string]float64{LimitPerSync: 1, LimitTotal: 2, LimitRead: 0} {
		if got := value(m.limited.WithLabelValues(b)); got != n {
			t.Errorf("limited %s: %v, want %v", b, got, n)
		}
	}
	want := []string{
		"fleet: bans: applied 3 this sync, bans.max_per_sync; the rest wait for the next syncs",
		"fleet: bans: under the per_sync bound again",
		"fleet: bans: holding 5, the most bans.max_imported and the table allow; the rest wait until some end",
		"fleet: bans: under the total bound again",
	}
	if strings.Join(log, "\n") != strings.Join(want, "\n") {
		t.Fatalf("logged:\n%s\nwant:\n%s", strings.Join(log, "\n"), strings.Join(want, "\n"))
	}
}

// value reads a counter or gauge.
func value(c prometheus.Metric) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	if m.Gauge != nil {
		return m.GetGauge().GetValue()
	}
	return m.GetCounter().GetValue()
}

// Every source registers the same families in one registry, told apart by
// their source label.
func TestMetricsOfTwoSources(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	for _, source := range []string{"fleet", "crowdsec"} {
		for _, c := range NewMetrics(source, "eth0").Collectors() {
			if err := reg.Register(c); err != nil {
				t.Fatalf("%s: %v", source, err)
			}
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "xdplimit_bans_imported" && len(mf.GetMetric()) != 2 {
			t.Errorf("%s: %d series, want one per source", mf.GetName(), len(mf.GetMetric()))
		}
	}
}
