// SPDX-License-Identifier: Apache-2.0

package conversation

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the conversation checks' series that the attach registers
// beside the exporter's (what the checks dropped is the exporter's own,
// from the datapath's counters).
type Metrics struct {
	// Armed is 1 while a check judges every packet: when always, or
	// under_attack and armed; by interface and check.
	Armed *prometheus.GaugeVec
}

// NewMetrics returns the series, not registered.
func NewMetrics() *Metrics {
	return &Metrics{Armed: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "xdplimit_conversation_armed",
		Help: "1 while a conversation check judges every packet (when: always, or under_attack and armed), 0 otherwise."},
		[]string{"interface", "check"})}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) { m.Armed.Describe(ch) }

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) { m.Armed.Collect(ch) }
