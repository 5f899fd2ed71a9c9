// SPDX-License-Identifier: Apache-2.0

package metrics_test

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/metrics"
)

// TestTableFill: each large table's size and fill, from the entries the
// datapath created: 20 sources at a sliding_log level fill 20 logs (and 20
// state entries) of a table sized a sixteenth of the state table's; two
// bans fill two slots.
func TestTableFill(t *testing.T) {
	const capacity, sources = 1024, 20
	l, _ := load(t, capacity, `
rules:
  - name: login
    match: {protocol: udp, dst_ports: [22]}
    limit: {algorithm: sliding_log, packets: 2, window: 1m}
`)
	for i := range sources {
		xdpltest.Run(t, l, udp4(fmt.Sprintf("203.0.113.%d", i), 22), t0)
	}
	for _, p := range []string{"198.51.100.0/24", "2001:db8::/48"} {
		if _, err := l.Ban(netip.MustParsePrefix(p), time.Hour, "test"); err != nil {
			t.Fatal(err)
		}
	}
	e := metrics.New(nil)
	if err := e.Add("test0", l, 0); err != nil {
		t.Fatal(err)
	}
	all := scrape(t, e.Registry())
	sel := func(name, table string) string {
		return fmt.Sprintf(`xdplimit_table_%s{interface="test0",table=%q}`, name, table)
	}
	for k, v := range map[string]float64{
		sel("capacity", "state"):       float64(l.SourcesCapacity()),
		sel("entries", "state"):        sources,
		sel("capacity", "sliding_log"): capacity / 16,
		sel("entries", "sliding_log"):  sources,
		sel("capacity", "bans"):        float64(l.BansCapacity()),
		sel("entries", "bans"):         2,
	} {
		if got, ok := all[k]; !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
		}
	}
}

// TestTableFillUnallocated: a limiter loaded without the sliding_log table
// shows its capacity as 0, and refuses a policy that needs it, keeping the
// one in force.
func TestTableFillUnallocated(t *testing.T) {
	img, _ := xdpltest.CompilePolicy(t, "rules:\n  - name: dns\n    match: {protocol: udp, dst_ports: [53]}\n"+
		"    limit: {algorithm: token_bucket, rate: 1/m, burst: 1}\n")
	l := xdpltest.LoadImage(t, maps.Options{Clock: maps.ClockMap, MaxSources: 1024, MaxLogs: maps.UnusedLogs}, img)
	e := metrics.New(nil)
	if err := e.Add("test0", l, 0); err != nil {
		t.Fatal(err)
	}
	all := scrape(t, e.Registry())
	for _, name := range []string{"capacity", "entries"} {
		k := fmt.Sprintf(`xdplimit_table_%s{interface="test0",table="sliding_log"}`, name)
		if got, ok := all[k]; !ok || got != 0 {
			t.Errorf("%s = %v (present %v), want 0", k, got, ok)
		}
	}
	err := l.Apply(xdpltest.Compile(t, "rules:\n  - name: login\n    match: {protocol: udp, dst_ports: [22]}\n"+
		"    limit: {algorithm: sliding_log, packets: 2, window: 1m}\n"))
	if err == nil || !strings.Contains(err.Error(), "sliding_log") {
		t.Fatalf("a sliding_log policy on a limiter without the table: %v, want a refusal", err)
	}
	stats, err := l.RuleStats()
	if err != nil {
		t.Fatal(err)
	}
	if len(stats) != 1 || stats[0].Name != "dns" {
		t.Errorf("after the refusal the rules in force are %+v, want dns alone", stats)
	}
}
