// SPDX-License-Identifier: Apache-2.0

package main

import (
	"strings"
	"testing"
	"time"
)

// The real-traffic table says met or NOT MET by xdplimit's median over no
// XDP program's, against each kind's target, and names a failed cell.
func TestWriteTraffic(t *testing.T) {
	tr := &trafficResults{Reps: 3, Duration: time.Second,
		Measures: []trafficMeasure{{id: "iperf3-1", label: "one stream", unit: "Mbit/s"}, {id: "dns", label: "lookups", unit: "lookups/s"}},
		vals: map[[2]string]sample{
			{"iperf3-1", "none"}: {1000, 1010, 990}, {"iperf3-1", "pass"}: {995}, {"iperf3-1", "xdplimit"}: {980, 975, 985},
			{"dns", "none"}: {20000}, {"dns", "xdplimit"}: {18000},
		},
		errs: map[[2]string][]string{{"dns", "pass"}: {"dnsperf: exit 1"}},
	}
	var b strings.Builder
	(&report{Traffic: tr}).writeTraffic(&b)
	out := b.String()
	for _, want := range []string{
		"| one stream | 1000 Mbit/s (990 – 1010) | 995 Mbit/s (995 – 995) | 980 Mbit/s (975 – 985) | 0.980× | ≥ 0.97×: met | 0.995× | 0.985× |",
		"| lookups | 20000 lookups/s (20000 – 20000) | failed | 18000 lookups/s (18000 – 18000) | 0.900× | ≥ 0.95×: **NOT MET** | 0.000× | 0.000× |",
		"- dns under pass: 1 run(s) failed: dnsperf: exit 1",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
}

// Each kind of traffic is judged in the Targets table against its own
// ceiling, with the bare XDP_PASS floor beside it.
func TestTrafficTargets(t *testing.T) {
	tr := &trafficResults{vals: map[[2]string]sample{
		{"iperf3-1", "none"}: {1000}, {"iperf3-1", "pass"}: {500}, {"iperf3-1", "xdplimit"}: {970},
		{"iperf3-8", "none"}: {1000}, {"iperf3-8", "pass"}: {500}, {"iperf3-8", "xdplimit"}: {960},
		{"dns", "none"}: {100}, {"dns", "pass"}: {100}, {"dns", "xdplimit"}: {95},
	}}
	checkTargets(t, tr.targets(), []wantTarget{
		{"veth, real traffic through xdplimit with a web server's policy: iperf3", "**NOT MET** (iperf3-8)",
			"iperf3-1 0.970× (1.940× bare XDP_PASS), iperf3-8 0.960× (1.920× bare XDP_PASS); the floor, a bare XDP_PASS: 0.500×, 0.500× no XDP program"},
		{"veth, real traffic through xdplimit with a web server's policy: DNS", "met", "dns 0.950×"},
	})
	if got := targetByPrefix(t, (&trafficResults{}).targets(), "veth, real traffic through xdplimit with a web server's policy: DNS"); got.status != "not measured" {
		t.Errorf("nothing measured: %+v", got)
	}
}

// The SYN cookie target is xdplimit's answers per CPU-second over the
// kernel's own.
func TestSynCookieTarget(t *testing.T) {
	s := &synResults{Configs: []*synConfig{{id: "xdplimit-cookie", cpuRate: sample{500}}, {id: "kernel", cpuRate: sample{100}}}}
	if got := s.target(); got.status != "met" || got.measured != "5.00×" {
		t.Errorf("5× the kernel: %+v", got)
	}
	s.Configs[1].cpuRate = sample{101}
	if got := s.target(); got.status != "**NOT MET** (xdplimit syncookie)" {
		t.Errorf("4.95× the kernel: %+v", got)
	}
}
