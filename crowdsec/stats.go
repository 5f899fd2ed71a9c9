// SPDX-License-Identifier: Apache-2.0

package crowdsec

import (
	"maps"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Stats are a Bouncer's counters since New.
type Stats struct {
	Polls    uint64 // polls tried, failed ones included
	Resyncs  uint64 // successful startup=true polls
	Applied  uint64 // bans written by the Target
	Unbanned uint64 // bans ended by a deletion
	NotHeld  uint64 // deletions that found no ban of ours
	Skipped  map[SkipReason]uint64
	// PollErrors counts failed polls by kind.
	PollErrors map[ErrorKind]uint64
	// LastSuccess is the time of the last successful poll (Config.Now),
	// zero before the first.
	LastSuccess time.Time
}

func (s *Stats) init() {
	s.Skipped = map[SkipReason]uint64{}
	s.PollErrors = map[ErrorKind]uint64{}
}

func (b *Bouncer) record(f func(*Stats)) {
	b.statsMu.Lock()
	defer b.statsMu.Unlock()
	f(&b.stats)
}

// Stats returns a copy of the counters (safe while Run runs).
func (b *Bouncer) Stats() Stats {
	b.statsMu.Lock()
	defer b.statsMu.Unlock()
	s := b.stats
	s.Skipped = maps.Clone(s.Skipped)
	s.PollErrors = maps.Clone(s.PollErrors)
	return s
}

// collector exports a Bouncer's Stats, read at scrape time.
type collector struct {
	b                                          *Bouncer
	polls, resyncs, applied, unbanned, notHeld *prometheus.Desc
	skipped, errors, lastSuccess               *prometheus.Desc
}

// Collector returns the Bouncer's xdplimit_crowdsec_* series, with the
// given constant labels, for the daemon to register. Every skip reason and
// error kind is exported, zeros included, so alerts can rate() them from
// the start.
func (b *Bouncer) Collector(constLabels prometheus.Labels) prometheus.Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("xdplimit_crowdsec_"+name, help, labels, constLabels)
	}
	return &collector{b: b,
		polls:    d("polls_total", "Polls of the CrowdSec LAPI decision stream, failed ones included."),
		resyncs:  d("resyncs_total", "Successful full resynchronisations (startup=true polls): the first, and the first after each failure."),
		applied:  d("decisions_applied_total", "Bans written to the ban table from decisions (new, renewed, or waiting from earlier polls)."),
		unbanned: d("decisions_deleted_total", "Bans ended because the LAPI deleted (or expired) their decision."),
		notHeld:  d("deletions_not_held_total", "Deletions from the LAPI that ended no ban (already ended, never applied, another origin's, or another decision still in force)."),
		skipped: d("decisions_skipped_total", "Decisions not passed to the ban table, by reason: type and filtered are configuration; scope, value, duration and malformed are bad input from the LAPI (what the ban table's limits refuse is in xdplimit_bans_refused_total).",
			"reason"),
		errors:      d("poll_errors_total", "Polls that failed, by kind: connect, timeout, auth, status, too_large, too_many, decode, canceled (nothing applied); target (the ban table failed).", "kind"),
		lastSuccess: d("last_success_timestamp_seconds", "Unix time of the last successful poll, 0 before the first."),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.polls, c.resyncs, c.applied, c.unbanned, c.notHeld, c.skipped, c.errors, c.lastSuccess} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.b.Stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(c.polls, s.Polls)
	counter(c.resyncs, s.Resyncs)
	counter(c.applied, s.Applied)
	counter(c.unbanned, s.Unbanned)
	counter(c.notHeld, s.NotHeld)
	for _, r := range SkipReasons {
		counter(c.skipped, s.Skipped[r], string(r))
	}
	for _, k := range ErrorKinds {
		counter(c.errors, s.PollErrors[k], string(k))
	}
	var last float64
	if !s.LastSuccess.IsZero() {
		last = float64(s.LastSuccess.UnixNano()) / 1e9
	}
	ch <- prometheus.MustNewConstMetric(c.lastSuccess, prometheus.GaugeValue, last)
}
