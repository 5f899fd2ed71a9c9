// SPDX-License-Identifier: Apache-2.0

package metrics_test

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
	"github.com/xdplimit/xdplimit/policy"
)

const (
	xdpDrop = 1
	xdpPass = 2
	t0      = 10 * time.Second // injected time of every packet
)

// load loads the limiter with the injected clock, installs the policy and
// its provenance (what xdplimit_policy_info reports), and sets the clock
// to t0.
func load(tb testing.TB, maxSources uint32, yaml string) (*maps.Limiter, *policy.Policy) {
	tb.Helper()
	img, p := xdpltest.CompilePolicy(tb, yaml)
	l := xdpltest.LoadImage(tb, maps.Options{Clock: maps.ClockMap, MaxSources: maxSources}, img)
	if err := l.SetPolicyInfo(p.Path, p.SHA256); err != nil {
		tb.Fatal(err)
	}
	if err := l.SetClock(uint64(t0)); err != nil {
		tb.Fatal(err)
	}
	return l, p
}

var dst4 = netip.MustParseAddr("10.0.0.1")

func udp4(src string, dport uint16) []byte {
	return pktgen.UDP4(netip.MustParseAddr(src), dst4, 4000, dport, 18)
}

func tcpSyn4(src string) []byte {
	return pktgen.TCP4(netip.MustParseAddr(src), dst4, 4000, 80, pktgen.TCPSyn, 10)
}

// scrape gathers reg and flattens every sample to `name{l1="v1",...}` ->
// value, labels sorted by name as Prometheus prints them.
func scrape(tb testing.TB, reg prometheus.Gatherer) map[string]float64 {
	tb.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatalf("gather: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			out[seriesName(mf.GetName(), m.GetLabel())] = value(mf.GetType(), m)
		}
	}
	return out
}

func seriesName(name string, labels []*dto.LabelPair) string {
	var ls []string
	for _, l := range labels {
		ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
	}
	sort.Strings(ls)
	return name + "{" + strings.Join(ls, ",") + "}"
}

func value(t dto.MetricType, m *dto.Metric) float64 {
	switch t {
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue()
	case dto.MetricType_GAUGE:
		return m.GetGauge().GetValue()
	case dto.MetricType_UNTYPED:
		return m.GetUntyped().GetValue()
	}
	return -1
}

// family returns the series of one metric family.
func family(all map[string]float64, name string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range all {
		if strings.HasPrefix(k, name+"{") {
			out[k] = v
		}
	}
	return out
}
