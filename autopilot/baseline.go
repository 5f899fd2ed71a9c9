// SPDX-License-Identifier: Apache-2.0

package autopilot

// What a pilot learns of a destination's normal traffic: its rate, and
// its recent samples.

import (
	"math"
	"slices"
	"time"
)

// quiet is an interval below the threshold, not yet learned.
type quiet struct {
	rate, dur float64
	samples   []Sample
}

// ring keeps the last n samples.
type ring struct {
	buf  []Sample
	next int
	n    int
}

func (r *ring) add(s Sample) {
	if len(r.buf) < r.n {
		r.buf = append(r.buf, s)
		return
	}
	r.buf[r.next] = s
	r.next = (r.next + 1) % r.n
}

// learn folds a quiet interval into d's baseline: its rate into the EWMA
// (a running mean until tau has passed, so that a young baseline is not
// pulled toward zero), its samples into the normal rings. An interval is
// held back for holdBack intervals first: an attack's onset, below the
// threshold in the second it starts, must not become normal traffic.
func (p *Pilot) learn(now time.Time, d *destState, rate, dur float64) {
	d.held = append(d.held, quiet{rate: rate, dur: dur, samples: d.pending})
	if len(d.held) <= holdBack {
		return
	}
	q := d.held[0]
	d.held = slices.Delete(d.held, 0, 1)
	alpha := 1 - math.Exp(-q.dur/tau.Seconds())
	if age := now.Sub(d.since).Seconds(); age > 0 {
		alpha = max(alpha, min(q.dur/age, 1))
	}
	d.base += alpha * (q.rate - d.base)
	for _, s := range q.samples {
		d.normal.add(s)
		p.host.add(s)
	}
}
