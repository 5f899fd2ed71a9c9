// SPDX-License-Identifier: Apache-2.0

package metrics_test

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/metrics"
)

const collectorPolicy = `
rules:
  - name: dns
    match: {protocol: udp, dst_ports: [53]}
    limit: {algorithm: token_bucket, rate: 1/s, burst: 2}
    aggregate:
      - key: global
        limit: {algorithm: token_bucket, rate: 1/s, burst: 3}
  - name: syn
    match: {protocol: tcp}
    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}
    action: shadow
allow: [192.0.2.0/24]
deny: [198.51.100.0/24]
`

// TestCollector drives crafted packets through the real program and checks
// every series the collector derives from the counters, exactly.
func TestCollector(t *testing.T) {
	l, p := load(t, 1<<16, collectorPolicy)
	f := sendCollectorFrames(t, l)

	e := metrics.New(nil)
	if err := e.Add("test0", l, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.Add("test0", l, 0); err == nil {
		t.Error("adding an interface twice: no error")
	}
	all := scrape(t, e.Registry())
	cs, err := l.Counters()
	if err != nil {
		t.Fatal(err)
	}
	info, err := l.Program().Info()
	if err != nil {
		t.Fatal(err)
	}
	progID, _ := info.ID()
	want := f.wantTraffic()
	for name, w := range wantTables(l, cs) {
		want[name] = w
	}
	for name, w := range wantInfo(p.SHA256[:], progID) {
		want[name] = w
	}
	expectFamilies(t, all, want)
	// Maps created by maps.Load, not attached: no attach time recorded.
	if got := family(all, "xdplimit_attach_time_seconds"); len(got) != 0 {
		t.Errorf("attach time of an unattached limiter: %v", got)
	}
	for _, name := range []string{"go_goroutines", "process_open_fds"} {
		if len(family(all, name)) == 0 {
			t.Errorf("no %s: Go or process collector missing", name)
		}
	}

	e.ReloadResult("test0", nil)
	e.ReloadResult("test0", nil)
	e.ReloadResult("test0", errors.New("bad policy"))
	all = scrape(t, e.Registry())
	for k, v := range map[string]float64{
		`xdplimit_policy_reloads_total{interface="test0",result="success"}`: 2,
		`xdplimit_policy_reloads_total{interface="test0",result="failure"}`: 1,
	} {
		if all[k] != v {
			t.Errorf("%s = %v, want %v", k, all[k], v)
		}
	}

	e.Remove("test0")
	for k := range scrape(t, e.Registry()) {
		if strings.Contains(k, `interface="test0"`) {
			t.Errorf("after Remove: %s", k)
		}
	}
}

// collectorFrames are the frames TestCollector sends, one of each outcome
// of collectorPolicy.
type collectorFrames struct {
	dnsA, dnsB, syn, allow, deny, unmatched, arp, malformed []byte
}

// sendCollectorFrames runs each frame through the program as many times as
// its outcome needs, checking each verdict.
func sendCollectorFrames(t *testing.T, l *maps.Limiter) collectorFrames {
	t.Helper()
	f := collectorFrames{
		dnsA: udp4("203.0.113.1", 53), dnsB: udp4("203.0.113.2", 53),
		syn:   tcpSyn4("203.0.113.3"),
		allow: udp4("192.0.2.1", 53), deny: udp4("198.51.100.1", 53),
		unmatched: udp4("203.0.113.4", 80),
		arp:       make([]byte, 60),
		malformed: udp4("203.0.113.5", 53)[:14+12], // IPv4 header cut short
	}
	f.arp[12], f.arp[13] = 0x08, 0x06
	for _, c := range []struct {
		frame []byte
		want  []uint32
	}{
		// A's own bucket (burst 2) admits two, refuses the third (level 0).
		{f.dnsA, []uint32{xdpPass, xdpPass, xdpDrop}},
		// B's own bucket admits both, the global one (burst 3) only the
		// first: level 1 refuses the second.
		{f.dnsB, []uint32{xdpPass, xdpDrop}},
		// Shadow: refused twice, passed anyway.
		{f.syn, []uint32{xdpPass, xdpPass, xdpPass}},
		{f.allow, []uint32{xdpPass}},
		{f.deny, []uint32{xdpDrop, xdpDrop}},
		{f.unmatched, []uint32{xdpPass}},
		{f.arp, []uint32{xdpPass}},
		{f.malformed, []uint32{xdpPass}},
	} {
		for i, want := range c.want {
			if got := xdpltest.Run(t, l, c.frame, t0); got != want {
				t.Fatalf("frame %x packet %d: verdict %d, want %d", c.frame[:4], i, got, want)
			}
		}
	}
	return f
}

// wantTraffic is what the frames sent add to the traffic series: packets
// and bytes by rule and verdict, bans, the levels that refused, unparsed
// frames by kind.
func (f collectorFrames) wantTraffic() map[string]map[string]float64 {
	n := func(f []byte, k int) float64 { return float64(len(f) * k) }
	series := func(name, rule, verdict string) string {
		return fmt.Sprintf(`%s{interface="test0",rule=%q,verdict=%q}`, name, rule, verdict)
	}
	return map[string]map[string]float64{
		"xdplimit_packets_total": {
			series("xdplimit_packets_total", "dns", "pass"):                   3,
			series("xdplimit_packets_total", "dns", "drop"):                   2,
			series("xdplimit_packets_total", "dns", "shadow_drop"):            0,
			series("xdplimit_packets_total", "syn", "pass"):                   1,
			series("xdplimit_packets_total", "syn", "drop"):                   0,
			series("xdplimit_packets_total", "syn", "shadow_drop"):            2,
			series("xdplimit_packets_total", "_allow", "pass"):                1,
			series("xdplimit_packets_total", "_deny", "drop"):                 2,
			series("xdplimit_packets_total", "_deny", "shadow_drop"):          0,
			series("xdplimit_packets_total", "_unmatched", "pass"):            1,
			series("xdplimit_packets_total", "_malformed", "pass"):            1,
			series("xdplimit_packets_total", "_malformed", "drop"):            0,
			series("xdplimit_packets_total", "_non_ip", "pass"):               1,
			series("xdplimit_packets_total", "_ban", "drop"):                  0,
			series("xdplimit_packets_total", "_ban", "shadow_drop"):           0,
			series("xdplimit_packets_total", "_no_connection", "drop"):        0,
			series("xdplimit_packets_total", "_no_connection", "shadow_drop"): 0,
			series("xdplimit_packets_total", "_no_socket", "drop"):            0,
			series("xdplimit_packets_total", "_no_socket", "shadow_drop"):     0,
			series("xdplimit_packets_total", "_no_request", "drop"):           0,
			series("xdplimit_packets_total", "_no_request", "shadow_drop"):    0,
		},
		"xdplimit_bytes_total": {
			series("xdplimit_bytes_total", "dns", "pass"):                   n(f.dnsA, 2) + n(f.dnsB, 1),
			series("xdplimit_bytes_total", "dns", "drop"):                   n(f.dnsA, 1) + n(f.dnsB, 1),
			series("xdplimit_bytes_total", "dns", "shadow_drop"):            0,
			series("xdplimit_bytes_total", "syn", "pass"):                   n(f.syn, 1),
			series("xdplimit_bytes_total", "syn", "drop"):                   0,
			series("xdplimit_bytes_total", "syn", "shadow_drop"):            n(f.syn, 2),
			series("xdplimit_bytes_total", "_allow", "pass"):                n(f.allow, 1),
			series("xdplimit_bytes_total", "_deny", "drop"):                 n(f.deny, 2),
			series("xdplimit_bytes_total", "_deny", "shadow_drop"):          0,
			series("xdplimit_bytes_total", "_unmatched", "pass"):            n(f.unmatched, 1),
			series("xdplimit_bytes_total", "_malformed", "pass"):            n(f.malformed, 1),
			series("xdplimit_bytes_total", "_malformed", "drop"):            0,
			series("xdplimit_bytes_total", "_non_ip", "pass"):               n(f.arp, 1),
			series("xdplimit_bytes_total", "_ban", "drop"):                  0,
			series("xdplimit_bytes_total", "_ban", "shadow_drop"):           0,
			series("xdplimit_bytes_total", "_no_connection", "drop"):        0,
			series("xdplimit_bytes_total", "_no_connection", "shadow_drop"): 0,
			series("xdplimit_bytes_total", "_no_socket", "drop"):            0,
			series("xdplimit_bytes_total", "_no_socket", "shadow_drop"):     0,
			series("xdplimit_bytes_total", "_no_request", "drop"):           0,
			series("xdplimit_bytes_total", "_no_request", "shadow_drop"):    0,
		},
		"xdplimit_bans_started_total": {
			`xdplimit_bans_started_total{interface="test0",kind="rule"}`:   0,
			`xdplimit_bans_started_total{interface="test0",kind="manual"}`: 0,
		},
		"xdplimit_bans_ended_total":    {`xdplimit_bans_ended_total{interface="test0"}`: 0},
		"xdplimit_bans_replaced_total": {`xdplimit_bans_replaced_total{interface="test0"}`: 0},
		"xdplimit_bans_active":         {},
		"xdplimit_level_drops_total": {
			`xdplimit_level_drops_total{interface="test0",level="0",rule="dns"}`: 1,
			`xdplimit_level_drops_total{interface="test0",level="1",rule="dns"}`: 1,
			`xdplimit_level_drops_total{interface="test0",level="0",rule="syn"}`: 2,
		},
		"xdplimit_unparsed_packets_total":         unparsedSeries("xdplimit_unparsed_packets_total", map[string]float64{"truncated": 1}),
		"xdplimit_unparsed_dropped_packets_total": unparsedSeries("xdplimit_unparsed_dropped_packets_total", nil),
	}
}

// wantTables are the state tables' series after the frames sent.
func wantTables(l *maps.Limiter, cs map[maps.Counter]maps.CounterValue) map[string]map[string]float64 {
	return map[string]map[string]float64{
		// New entries: A's own, B's own, the SYN source's own (the global
		// level's state is a slot, not a table entry); the refused third
		// packet of A creates nothing.
		"xdplimit_source_inserts_total":         {`xdplimit_source_inserts_total{interface="test0"}`: 3},
		"xdplimit_tracked_sources":              {`xdplimit_tracked_sources{interface="test0"}`: 3},
		"xdplimit_source_table_evictions_total": {`xdplimit_source_table_evictions_total{interface="test0"}`: 0},
		// Both tables: the IPv4 one (1<<16) and the other keys' (a quarter).
		"xdplimit_source_table_capacity":              {`xdplimit_source_table_capacity{interface="test0"}`: float64(l.SourcesCapacity())},
		"xdplimit_source_table_insert_failures_total": {`xdplimit_source_table_insert_failures_total{interface="test0"}`: 0},
		"xdplimit_contended_updates_total":            {`xdplimit_contended_updates_total{interface="test0"}`: 0},
		"xdplimit_untracked_packets_total":            {`xdplimit_untracked_packets_total{interface="test0"}`: 0},
		// Which refusals a cache answers depends on the CPUs the runs
		// landed on (the caches are per CPU): the datapath's own counts.
		"xdplimit_cached_refusals_total": {
			`xdplimit_cached_refusals_total{cache="flow",interface="test0"}`:    float64(cs[maps.CounterFlowCached].Packets),
			`xdplimit_cached_refusals_total{cache="refused",interface="test0"}`: float64(cs[maps.CounterRefusedCached].Packets),
		},
	}
}

// wantInfo are the series that describe the policy and program in force
// and the reloads.
func wantInfo(sha256 []byte, progID ebpf.ProgramID) map[string]map[string]float64 {
	return map[string]map[string]float64{
		"xdplimit_policy_info": {
			fmt.Sprintf(`xdplimit_policy_info{interface="test0",sha256=%q}`, hex.EncodeToString(sha256)): 1,
		},
		"xdplimit_program_info": {
			fmt.Sprintf(`xdplimit_program_info{interface="test0",mode="none",prog_id="%d"}`, progID): 1,
		},
		"xdplimit_up": {`xdplimit_up{interface="test0"}`: 1},
		"xdplimit_policy_reloads_total": {
			`xdplimit_policy_reloads_total{interface="test0",result="success"}`: 0,
			`xdplimit_policy_reloads_total{interface="test0",result="failure"}`: 0,
		},
	}
}

// expectFamilies checks that each family of want holds exactly its series,
// with their values.
func expectFamilies(t *testing.T, all map[string]float64, want map[string]map[string]float64) {
	t.Helper()
	for name, w := range want {
		got := family(all, name)
		for k, v := range w {
			if g, ok := got[k]; !ok {
				t.Errorf("missing %s", k)
			} else if g != v {
				t.Errorf("%s = %v, want %v", k, g, v)
			}
		}
		for k, v := range got {
			if _, ok := w[k]; !ok {
				t.Errorf("unexpected series %s = %v", k, v)
			}
		}
	}
}

// TestReloadKeepsCounters: a reload keeps the counters of rules it keeps,
// drops the series of rules it removes, and starts new rules at zero.
func TestReloadKeepsCounters(t *testing.T) {
	l, _ := load(t, 1<<16, collectorPolicy)
	for range 3 {
		xdpltest.Run(t, l, udp4("203.0.113.1", 53), t0)
	}
	img := xdpltest.Compile(t, `
rules:
  - name: dns
    match: {protocol: udp, dst_ports: [53]}
    limit: {algorithm: token_bucket, rate: 1/s, burst: 2}
    aggregate:
      - key: global
        limit: {algorithm: token_bucket, rate: 1/s, burst: 3}
  - name: ntp
    match: {protocol: udp, dst_ports: [123]}
    limit: {algorithm: token_bucket, rate: 1/s, burst: 2}
`)
	if err := l.Apply(img); err != nil {
		t.Fatal(err)
	}
	e := metrics.New(nil)
	if err := e.Add("test0", l, 0); err != nil {
		t.Fatal(err)
	}
	got := family(scrape(t, e.Registry()), "xdplimit_packets_total")
	for k, v := range map[string]float64{
		`xdplimit_packets_total{interface="test0",rule="dns",verdict="pass"}`:   2,
		`xdplimit_packets_total{interface="test0",rule="dns",verdict="drop"}`:   1,
		`xdplimit_packets_total{interface="test0",rule="ntp",verdict="pass"}`:   0,
		`xdplimit_packets_total{interface="test0",rule="ntp",verdict="drop"}`:   0,
		`xdplimit_packets_total{interface="test0",rule="_deny",verdict="drop"}`: 0,
	} {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	for k := range got {
		if strings.Contains(k, `rule="syn"`) {
			t.Errorf("removed rule still exported: %s", k)
		}
	}
}

// TestTableEstimates fills a small table past its capacity and checks the
// derived tracked-sources and eviction series against the insert count,
// then compares the estimate with a walk of the table.
func TestTableEstimates(t *testing.T) {
	const capacity, sources = 256, 300
	l, _ := load(t, capacity, `
rules:
  - name: all
    limit: {algorithm: token_bucket, rate: 1/s, burst: 5}
`)
	for i := range sources {
		xdpltest.Run(t, l, udp4(fmt.Sprintf("203.0.%d.%d", 113+i/256, i%256), 53), t0)
	}
	e := metrics.New(nil)
	if err := e.Add("test0", l, 0); err != nil {
		t.Fatal(err)
	}
	all := scrape(t, e.Registry())
	// The capacity is both tables'; 300 IPv4 sources overflow the IPv4
	// table (256) but not the sum (320), so the estimate is the inserts,
	// an upper bound, as documented.
	total := float64(l.SourcesCapacity())
	for k, v := range map[string]float64{
		`xdplimit_source_inserts_total{interface="test0"}`:                    sources,
		`xdplimit_tracked_sources{interface="test0"}`:                         min(sources, total),
		`xdplimit_source_table_capacity{interface="test0"}`:                   total,
		`xdplimit_source_table_evictions_total{interface="test0"}`:            max(0, sources-total),
		`xdplimit_source_table_insert_failures_total{interface="test0"}`:      0,
		`xdplimit_packets_total{interface="test0",rule="all",verdict="pass"}`: sources,
	} {
		if all[k] != v {
			t.Errorf("%s = %v, want %v", k, all[k], v)
		}
	}
	walked, err := l.TrackedSources()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("capacity %d, %d inserts: estimate %v tracked, the walk finds %d", capacity, sources,
		all[`xdplimit_tracked_sources{interface="test0"}`], walked)
	if walked > capacity {
		t.Errorf("walk found %d entries in a table of %d", walked, capacity)
	}
}

// unparsedSeries is a per-kind family: every kind, 0 unless given.
func unparsedSeries(name string, vals map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k := range maps.UnparsedKinds {
		kind := maps.UnparsedKind(k).String()
		out[fmt.Sprintf(`%s{interface="test0",kind=%q}`, name, kind)] = vals[kind]
	}
	return out
}

// The cache series follow their caches: on one CPU, a flood over a
// one-a-minute limit is refused from state (noted), then from the
// refused-until cache (which copies it to the flow cache), then from the
// flow cache.
func TestCachedRefusals(t *testing.T) {
	testutil.PinCPU(t, 0) // the caches are per CPU
	l, _ := load(t, 1<<16, `
rules:
  - name: dns
    match: {protocol: udp, dst_ports: [53]}
    limit: {algorithm: token_bucket, rate: 1/m, burst: 1}
`)
	for range 6 {
		xdpltest.Run(t, l, udp4("192.0.2.1", 53), t0)
	}
	e := metrics.New(nil)
	if err := e.Add("test0", l, 0); err != nil {
		t.Fatal(err)
	}
	all := scrape(t, e.Registry())
	for k, v := range map[string]float64{
		`xdplimit_packets_total{interface="test0",rule="dns",verdict="drop"}`: 5,
		`xdplimit_cached_refusals_total{cache="refused",interface="test0"}`:   1,
		`xdplimit_cached_refusals_total{cache="flow",interface="test0"}`:      3,
	} {
		if all[k] != v {
			t.Errorf("%s = %v, want %v", k, all[k], v)
		}
	}
}
