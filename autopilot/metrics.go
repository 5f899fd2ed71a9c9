// SPDX-License-Identifier: Apache-2.0

package autopilot

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the autopilot's series, one set an interface. The
// generated rules' own traffic is counted by the rule series like any
// rule's, under the rule's name (autopilot-...).
type Metrics struct {
	attacks   prometheus.Counter
	decisions *prometheus.CounterVec
	rules     prometheus.Gauge
	active    prometheus.Gauge
	samples   prometheus.Counter
	lost      prometheus.Counter
}

// NewMetrics makes the series of the autopilot of iface.
func NewMetrics(iface string) *Metrics {
	l := prometheus.Labels{"interface": iface}
	m := &Metrics{
		attacks: prometheus.NewCounter(prometheus.CounterOpts{Name: "xdplimit_autopilot_attacks_total",
			Help: "Attacks the autopilot declared: a destination's packet rate past its floor and its baseline's multiple.", ConstLabels: l}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xdplimit_autopilot_decisions_total",
			Help:        "The autopilot's decisions: rule (a rule written), no_rule (an attack it wrote none for; the log says why), ended (an attack below its threshold for expire), removed (a rule removed).",
			ConstLabels: l}, []string{"decision"}),
		rules: prometheus.NewGauge(prometheus.GaugeOpts{Name: "xdplimit_autopilot_rules",
			Help: "Generated rules in force.", ConstLabels: l}),
		active: prometheus.NewGauge(prometheus.GaugeOpts{Name: "xdplimit_autopilot_attacks_active",
			Help: "Attacks in progress (not yet below their threshold for expire).", ConstLabels: l}),
		samples: prometheus.NewCounter(prometheus.CounterOpts{Name: "xdplimit_autopilot_samples_total",
			Help: "Sampled packets the autopilot read.", ConstLabels: l}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{Name: "xdplimit_autopilot_samples_lost_total",
			Help: "Sampled packets the rings overwrote before the autopilot read them (rates are scaled up for them).", ConstLabels: l}),
	}
	// Each decision's series from 0: its first one is an increase.
	for _, k := range []EventKind{EventRule, EventNoRule, EventEnded, EventRemoved} {
		m.decisions.WithLabelValues(k.String())
	}
	return m
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.attacks, m.decisions, m.rules, m.active, m.samples, m.lost}
}

func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

// Observe counts a tick's events and the pilot's state after it.
func (m *Metrics) Observe(p *Pilot, events []Event) {
	for _, e := range events {
		if e.Kind == EventAttack {
			m.attacks.Inc()
			continue
		}
		m.decisions.WithLabelValues(e.Kind.String()).Inc()
	}
	m.rules.Set(float64(len(p.Rules())))
	m.active.Set(float64(len(p.Attacks())))
}

// Read counts samples read from the rings, and those the rings overwrote
// before they were read.
func (m *Metrics) Read(read, lost uint64) {
	m.samples.Add(float64(read))
	m.lost.Add(float64(lost))
}

// Off zeroes the gauges: the autopilot stopped.
func (m *Metrics) Off() {
	m.rules.Set(0)
	m.active.Set(0)
}
