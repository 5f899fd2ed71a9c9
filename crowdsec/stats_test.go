// SPDX-License-Identifier: Apache-2.0

package crowdsec

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestCollector(t *testing.T) {
	b, err := New(Config{URL: "http://127.0.0.1:1", APIKey: "k"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(b.Collector(prometheus.Labels{"lapi": "local"})); err != nil {
		t.Fatal(err)
	}
	b.record(func(s *Stats) {
		s.Polls, s.Resyncs, s.Applied, s.Unbanned, s.NotHeld = 5, 1, 10, 2, 3
		s.Skipped[SkipValue] = 4
		s.PollErrors[KindAuth] = 2
		s.LastSuccess = time.Unix(1700000000, 5e8)
	})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			name := mf.GetName()
			for _, l := range m.Label {
				if l.GetName() != "lapi" {
					name += "/" + l.GetValue()
				} else if l.GetValue() != "local" {
					t.Errorf("%s: const label %q", name, l.GetValue())
				}
			}
			if m.Counter != nil {
				got[name] = m.Counter.GetValue()
			} else {
				got[name] = m.Gauge.GetValue()
			}
		}
	}
	for name, want := range map[string]float64{
		"xdplimit_crowdsec_polls_total":                    5,
		"xdplimit_crowdsec_resyncs_total":                  1,
		"xdplimit_crowdsec_decisions_applied_total":        10,
		"xdplimit_crowdsec_decisions_deleted_total":        2,
		"xdplimit_crowdsec_deletions_not_held_total":       3,
		"xdplimit_crowdsec_decisions_skipped_total/value":  4,
		"xdplimit_crowdsec_decisions_skipped_total/scope":  0,
		"xdplimit_crowdsec_poll_errors_total/auth":         2,
		"xdplimit_crowdsec_poll_errors_total/connect":      0,
		"xdplimit_crowdsec_last_success_timestamp_seconds": 1700000000.5,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
	if n := len(got); n != 5+len(SkipReasons)+len(ErrorKinds)+1 {
		t.Errorf("%d series", n)
	}
}
