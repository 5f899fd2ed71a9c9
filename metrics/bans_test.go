// SPDX-License-Identifier: Apache-2.0

package metrics_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/banfeed"
	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/metrics"
)

const banMetricsPolicy = `
rules:
  - name: dns
    match: {protocol: udp, dst_ports: [53]}
    limit: {algorithm: fixed_window, packets: 1, window: 1m}
    action: ban
    ban: {for: 10m}
`

// The ban series: bans in force by origin, started by kind, ended, and
// the packets banned sources sent.
func TestBanMetrics(t *testing.T) {
	l, _ := load(t, 1<<16, banMetricsPolicy)
	dns := udp4("203.0.113.1", 53)
	for i, want := range []uint32{xdpPass, xdpDrop, xdpDrop, xdpDrop} {
		if got := xdpltest.Run(t, l, dns, t0); got != want {
			t.Fatalf("packet %d: verdict %d, want %d", i, got, want)
		}
	}
	manual := netip.MustParsePrefix("198.51.100.0/24")
	if _, err := l.Ban(manual, time.Hour, "by hand"); err != nil {
		t.Fatal(err)
	}
	// A CrowdSec decision's ban, written as the bouncer writes it.
	decided, _ := banfeed.Reason(banfeed.CrowdSec, "cscli/manual", "ban 7")
	if _, err := l.Ban(netip.MustParsePrefix("192.0.2.7/32"), time.Hour, decided); err != nil {
		t.Fatal(err)
	}
	e := metrics.New(nil)
	if err := e.Add("test0", l, 0); err != nil {
		t.Fatal(err)
	}
	check := func(want map[string]float64) {
		t.Helper()
		all := scrape(t, e.Registry())
		for k, v := range want {
			if g, ok := all[k]; !ok || g != v {
				t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
			}
		}
	}
	check(map[string]float64{
		`xdplimit_bans_active{interface="test0",origin="dns"}`:                 1,
		`xdplimit_bans_active{interface="test0",origin="manual"}`:              1,
		`xdplimit_bans_active{interface="test0",origin="crowdsec"}`:            1,
		`xdplimit_bans_started_total{interface="test0",kind="rule"}`:           1,
		`xdplimit_bans_started_total{interface="test0",kind="manual"}`:         2,
		`xdplimit_bans_ended_total{interface="test0"}`:                         0,
		`xdplimit_packets_total{interface="test0",rule="_ban",verdict="drop"}`: 2,
		`xdplimit_packets_total{interface="test0",rule="dns",verdict="drop"}`:  1,
	})
	if ok, err := l.Unban(manual); err != nil || !ok {
		t.Fatalf("unban: %v %v", ok, err)
	}
	check(map[string]float64{
		`xdplimit_bans_ended_total{interface="test0"}`: 1,
	})
}
