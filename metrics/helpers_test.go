package metrics_test

import (
	"fmt"
	"net/netip"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/xdplimit/xdplimit/compiler"
	"github.com/xdplimit/xdplimit/internal/testutil"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
	"github.com/xdplimit/xdplimit/policy"
)

const (
	xdpDrop = 1
	xdpPass = 2
	t0      = 10 * time.Second // injected time of every packet
)

// requireBPF: loading the program needs root (CAP_BPF); missing, the test
// fails in CI and skips elsewhere.
func requireBPF(tb testing.TB) {
	tb.Helper()
	testutil.Require(tb, os.Geteuid() == 0, "needs root (CAP_BPF) to load the XDP program")
}

func compile(tb testing.TB, yaml string) (*maps.Image, *policy.Policy) {
	tb.Helper()
	p, err := policy.Parse("test.yaml", []byte(yaml))
	if err != nil {
		tb.Fatalf("policy: %v", err)
	}
	img, err := compiler.Compile(p)
	if err != nil {
		tb.Fatalf("compile: %v", err)
	}
	return img, p
}

// load loads the limiter with the injected clock and installs the policy.
func load(tb testing.TB, maxSources uint32, yaml string) (*maps.Limiter, *policy.Policy) {
	tb.Helper()
	requireBPF(tb)
	img, p := compile(tb, yaml)
	l, err := maps.Load(maps.Options{Clock: maps.ClockMap, MaxSources: maxSources})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	if err := l.Apply(img); err != nil {
		tb.Fatalf("apply: %v", err)
	}
	if err := l.SetPolicyInfo(p.Path, p.SHA256); err != nil {
		tb.Fatal(err)
	}
	if err := l.SetClock(uint64(t0)); err != nil {
		tb.Fatal(err)
	}
	return l, p
}

// run runs the program once on frame and returns its verdict.
func run(tb testing.TB, l *maps.Limiter, frame []byte) uint32 {
	tb.Helper()
	ret, err := l.Program().Run(&ebpf.RunOptions{Data: frame, Repeat: 1})
	if err != nil {
		tb.Fatalf("test run: %v", err)
	}
	return ret
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
