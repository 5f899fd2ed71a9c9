// SPDX-License-Identifier: Apache-2.0

package fleet

// The readings the end-to-end tests make of a fleet: rule counters from the
// pins, `xdplimit status`, /metrics, the veth's XDP counters.

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testkit/fleetlab"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/loader"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/metrics"
)

// ruleCounts reads one rule's pass and drop packets on host h from the
// attach's pins (state shared by every namespace: bpffs is the machine's).
func ruleCounts(t *testing.T, h *fleetlab.Host, rule string) (pass, drop uint64) {
	t.Helper()
	pass, drop, err := readRule(h, rule)
	if err != nil {
		t.Fatal(err)
	}
	return pass, drop
}

// readRule is ruleCounts for goroutines other than the test's.
func readRule(h *fleetlab.Host, rule string) (pass, drop uint64, err error) {
	s, err := loader.Open(h.Eth0)
	if err != nil {
		return 0, 0, fmt.Errorf("host %d: %w", h.Index, err)
	}
	defer s.Close()
	stats, err := s.Limiter.RuleStats()
	if err != nil {
		return 0, 0, fmt.Errorf("host %d: rule counters: %w", h.Index, err)
	}
	for _, r := range stats {
		if r.Name == rule {
			return r.Verdicts[maps.VerdictPass].Packets, r.Verdicts[maps.VerdictDrop].Packets, nil
		}
	}
	return 0, 0, fmt.Errorf("host %d: no rule %q in force", h.Index, rule)
}

// runIn runs the command to completion (1 minute at most) in host h's
// namespace and returns its combined output.
func runIn(t *testing.T, h *fleetlab.Host, name string, args ...string) (string, error) {
	t.Helper()
	var out []byte
	var err error
	derr := h.NS.Do(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, err = exec.CommandContext(ctx, name, args...).CombinedOutput()
		return nil
	})
	if derr != nil {
		t.Fatal(derr)
	}
	return string(out), err
}

// statusFleetLine is the "fleet:" line of `xdplimit status` on host h.
func statusFleetLine(t *testing.T, h *fleetlab.Host) string {
	t.Helper()
	out, err := runIn(t, h, testutil.XdplimitBin(t), "status", h.Eth0)
	if err != nil {
		t.Fatalf("host %d: status: %v\n%s", h.Index, err, out)
	}
	for _, line := range strings.Split(out, "\n") {
		if s := strings.TrimSpace(line); strings.HasPrefix(s, "fleet:") {
			return s
		}
	}
	t.Fatalf("host %d: no fleet line in status:\n%s", h.Index, out)
	return ""
}

// metric sums every series of one metric on host h's /metrics (the attach
// serves it on loopback at the default address; each namespace has its
// own loopback). ok is false when the metric is absent.
func metric(t *testing.T, h *fleetlab.Host, name string) (sum float64, ok bool) {
	t.Helper()
	for series, v := range scrape(t, h) {
		if n, _, _ := strings.Cut(series, "{"); n == name {
			sum, ok = sum+v, true
		}
	}
	return sum, ok
}

// scrape reads host h's /metrics: every series (name and labels, as the
// exposition writes them) with its value.
func scrape(t *testing.T, h *fleetlab.Host) map[string]float64 {
	t.Helper()
	c := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{DialContext: testutil.DialIn(h.NS)},
	}
	defer c.CloseIdleConnections()
	return testutil.Scrape(t, c, "http://"+metrics.DefaultAddr+"/metrics")
}

// xdpPackets is what reached the XDP program on host h's Eth0, from the
// veth's own per-queue counters (ethtool -S rx_queue_N_xdp_packets): a
// veth whose ring is full drops frames before XDP sees them, so this, not
// what the generator sent, is what the limiter judged.
func xdpPackets(t *testing.T, h *fleetlab.Host) uint64 {
	t.Helper()
	out, err := runIn(t, h, "ethtool", "-S", h.Eth0)
	if err != nil {
		t.Fatalf("host %d: ethtool -S: %v\n%s", h.Index, err, out)
	}
	var n uint64
	found := false
	for _, line := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(k, "rx_queue_") || !strings.HasSuffix(k, "_xdp_packets") {
			continue
		}
		x, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil {
			t.Fatalf("host %d: ethtool line %q: %v", h.Index, line, err)
		}
		n += x
		found = true
	}
	if !found {
		t.Fatalf("host %d: no rx_queue_N_xdp_packets in ethtool -S:\n%s", h.Index, out)
	}
	return n
}
