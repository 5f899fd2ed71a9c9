// SPDX-License-Identifier: Apache-2.0

package droplog

import "github.com/prometheus/client_golang/prometheus"

// Reasons a sampled drop is not logged (besides the sampling itself).
const (
	ReasonRate    = "rate_cap" // over max_per_second
	ReasonBacklog = "backlog"  // the output's queue was full
	ReasonError   = "error"    // the output refused the write
	ReasonRing    = "ring"     // overwritten in the ring before it was read
)

// Metrics are the drop log's xdplimit_droplog_* series.
type Metrics struct {
	lines      prometheus.Counter
	suppressed *prometheus.CounterVec
}

// NewMetrics makes the series of one interface's drop log.
func NewMetrics(iface string) *Metrics {
	l := prometheus.Labels{"interface": iface}
	m := &Metrics{
		lines: prometheus.NewCounter(prometheus.CounterOpts{Name: "xdplimit_droplog_lines_total", ConstLabels: l,
			Help: "Drop log lines written (sampled drops and suppression summaries)."}),
		suppressed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xdplimit_droplog_suppressed_total", ConstLabels: l,
			Help: "Sampled drops not logged, by reason: rate_cap, backlog, error, ring."}, []string{"reason"}),
	}
	for _, r := range []string{ReasonRate, ReasonBacklog, ReasonError, ReasonRing} {
		m.suppressed.WithLabelValues(r)
	}
	return m
}

// Describe and Collect make Metrics a prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.lines.Describe(ch)
	m.suppressed.Describe(ch)
}

func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.lines.Collect(ch)
	m.suppressed.Collect(ch)
}
