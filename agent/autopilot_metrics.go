// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xdplimit/xdplimit/autopilot"
)

// pilotMetrics are the autopilot's series. The generated rules' own
// traffic is counted by the rule series like any rule's, under the rule's
// name (autopilot-...).
type pilotMetrics struct {
	attacks   prometheus.Counter
	decisions *prometheus.CounterVec
	rules     prometheus.Gauge
	active    prometheus.Gauge
	samples   prometheus.Counter
	lost      prometheus.Counter
}

func newPilotMetrics(iface string) *pilotMetrics {
	l := prometheus.Labels{"interface": iface}
	m := &pilotMetrics{
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
	for _, k := range []autopilot.EventKind{autopilot.EventRule, autopilot.EventNoRule, autopilot.EventEnded, autopilot.EventRemoved} {
		m.decisions.WithLabelValues(k.String())
	}
	return m
}

func (m *pilotMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.attacks, m.decisions, m.rules, m.active, m.samples, m.lost}
}

func (m *pilotMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

func (m *pilotMetrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

// observe counts a tick's events and the pilot's state after it.
func (m *pilotMetrics) observe(p *autopilot.Pilot, events []autopilot.Event) {
	for _, e := range events {
		if e.Kind == autopilot.EventAttack {
			m.attacks.Inc()
			continue
		}
		m.decisions.WithLabelValues(e.Kind.String()).Inc()
	}
	m.rules.Set(float64(len(p.Rules())))
	m.active.Set(float64(len(p.Attacks())))
}
