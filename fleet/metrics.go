// SPDX-License-Identifier: Apache-2.0

package fleet

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xdplimit/xdplimit/banfeed"
)

// Metrics are the engine's xdplimit_fleet_* series.
type Metrics struct {
	up        prometheus.Gauge
	levels    prometheus.Gauge
	hosts     prometheus.Gauge
	syncs     prometheus.Counter
	duration  prometheus.Histogram
	exchanged prometheus.Counter
	unsynced  prometheus.Counter
	remote    prometheus.Counter
	clamped   prometheus.Counter
	errors    *prometheus.CounterVec
	banHash   prometheus.Gauge
	// Per level (rule/level): keys exchanged, left out, crossed into the
	// exchange, in it now, and within their share at the last count.
	levelExchanged, levelUnsynced, levelCrossed *prometheus.CounterVec
	levelHot, levelWithin                       *prometheus.GaugeVec
	bans                                        *banfeed.Metrics // the gate's, source "fleet"
}

// NewMetrics makes the series of one interface's fleet sync (the engine makes
// its own; the exporter's tests list the families with it).
func NewMetrics(iface string) *Metrics {
	l := prometheus.Labels{"interface": iface}
	m := &Metrics{
		up: prometheus.NewGauge(prometheus.GaugeOpts{Name: "xdplimit_fleet_redis_up", ConstLabels: l,
			Help: "1 when the last exchange with Redis succeeded, 0 while fleet levels enforce with their fallback."}),
		levels: prometheus.NewGauge(prometheus.GaugeOpts{Name: "xdplimit_fleet_levels", ConstLabels: l,
			Help: "Fleet-scoped levels in the policy in force."}),
		hosts: prometheus.NewGauge(prometheus.GaugeOpts{Name: "xdplimit_fleet_live_hosts", ConstLabels: l,
			Help: "Hosts of the fleet that synced recently, as Redis last reported (fixed windows reserve the others' share; fallback share divides by it)."}),
		syncs: prometheus.NewCounter(prometheus.CounterOpts{Name: "xdplimit_fleet_syncs_total", ConstLabels: l,
			Help: "Sync intervals run (including those that could not reach Redis)."}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "xdplimit_fleet_sync_duration_seconds", ConstLabels: l,
			Help:    "Time one sync took: take, exchange with Redis, fold.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		exchanged: prometheus.NewCounter(prometheus.CounterOpts{Name: "xdplimit_fleet_keys_exchanged_total", ConstLabels: l,
			Help: "Keys whose consumption was exchanged with Redis."}),
		unsynced: prometheus.NewCounter(prometheus.CounterOpts{Name: "xdplimit_fleet_keys_unsynced_total", ConstLabels: l,
			Help: "Keys left out of a sync because it reached its bound on keys (the heaviest go first); they stay enforced locally."}),
		remote: prometheus.NewCounter(prometheus.CounterOpts{Name: "xdplimit_fleet_remote_units_applied_total", ConstLabels: l,
			Help: "Units (packets or bytes) admitted by other hosts and folded into this host's state."}),
		clamped: prometheus.NewCounter(prometheus.CounterOpts{Name: "xdplimit_fleet_debt_clamped_total", ConstLabels: l,
			Help: "Token-bucket keys whose debt in Redis ran beyond the level's burst and the policy's debt_horizon, set back to it: someone else wrote the key."}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xdplimit_fleet_sync_errors_total", ConstLabels: l,
			Help: "Syncs that failed, by kind: connect, timeout, auth, tls, protocol, server, datapath."}, []string{"kind"}),
		banHash: prometheus.NewGauge(prometheus.GaugeOpts{Name: "xdplimit_fleet_ban_hash_entries", ConstLabels: l,
			Help: "Entries in the fleet's ban hash at the last sync, valid or not."}),
		bans: banfeed.NewMetrics(banSource, iface),
		levelExchanged: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xdplimit_fleet_level_keys_exchanged_total", ConstLabels: l,
			Help: "Keys of a fleet level whose consumption was exchanged with Redis."}, []string{"level"}),
		levelUnsynced: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xdplimit_fleet_level_keys_unsynced_total", ConstLabels: l,
			Help: "Keys of a fleet level left out of a sync by its bound on keys."}, []string{"level"}),
		levelCrossed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xdplimit_fleet_level_keys_crossed_total", ConstLabels: l,
			Help: "Token-bucket keys that crossed their local share on this host and entered the exchange."}, []string{"level"}),
		levelHot: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "xdplimit_fleet_level_keys_exchanging", ConstLabels: l,
			Help: "Token-bucket keys in the exchange on this host (crossed here, or announced by another host)."}, []string{"level"}),
		levelWithin: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "xdplimit_fleet_level_keys_within_share", ConstLabels: l,
			Help: "Token-bucket keys in this host's state tables within their local share, never exchanged (counted every 10 s)."}, []string{"level"}),
	}
	for _, k := range ErrorKinds {
		m.errors.WithLabelValues(string(k))
	}
	return m
}

// Describe and Collect make Metrics a prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.all() {
		c.Describe(ch)
	}
}

func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.all() {
		c.Collect(ch)
	}
}

func (m *Metrics) all() []prometheus.Collector {
	return append([]prometheus.Collector{m.up, m.levels, m.hosts, m.syncs, m.duration, m.exchanged, m.unsynced, m.remote,
		m.clamped, m.errors, m.banHash, m.levelExchanged, m.levelUnsynced, m.levelCrossed, m.levelHot, m.levelWithin},
		m.bans.Collectors()...)
}
