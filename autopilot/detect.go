// SPDX-License-Identifier: Apache-2.0

package autopilot

import (
	"cmp"
	"slices"
	"time"
)

// DetectConfig is when a destination's packet rate is an attack: past an
// absolute floor and a multiple of its baseline rate, both.
type DetectConfig struct {
	Floor    float64 // packets per second (default 1000)
	Multiple float64 // of the baseline rate (default 10)
}

func (c DetectConfig) withDefaults() DetectConfig {
	if c.Floor <= 0 {
		c.Floor = 1000
	}
	if c.Multiple <= 0 {
		c.Multiple = 10
	}
	return c
}

// Attack is a destination whose rate crossed the thresholds in some
// seconds of a capture: the samples of those seconds, and of the others
// (or of the baseline capture) as its normal traffic.
type Attack struct {
	Dest         Dest
	Start, End   time.Time // the first attack second's start, the last's end
	Rate         float64   // packets per second over the attack's seconds
	BaselineRate float64   // packets per second of normal traffic
	Samples      []Sample
	Normal       []Sample
}

// Part is the share of a's samples that are the attack's own: its
// destination's normal traffic goes on during it, at the baseline rate.
func (a Attack) Part() float64 {
	if a.Rate <= 0 {
		return 1
	}
	return 1 - a.BaselineRate/a.Rate
}

// Detect finds the attacks in capture, one per destination, in 1-second
// bins. A destination's baseline rate is its rate in baseline when that is
// given (a capture of normal traffic), else the rate of its quietest
// quarter of the capture's seconds: an attack that lasts most of the
// capture needs a baseline capture to be told from normal traffic.
func Detect(capture, baseline []Sample, cfg DetectConfig) []Attack {
	cfg = cfg.withDefaults()
	if len(capture) == 0 {
		return nil
	}
	first, last := capture[0].Time, capture[0].Time
	for i := range capture {
		first, last = minTime(first, capture[i].Time), maxTime(last, capture[i].Time)
	}
	start := first.Truncate(time.Second)
	secs := int(last.Sub(start)/time.Second) + 1
	byDest := map[Dest][]int{} // packets per second
	for i := range capture {
		d := capture[i].Dst
		if byDest[d] == nil {
			byDest[d] = make([]int, secs)
		}
		byDest[d][int(capture[i].Time.Sub(start)/time.Second)]++
	}
	baseRate := ratesOf(baseline)
	var attacks []Attack
	for d, bins := range byDest {
		// Not seen in the baseline: 0, and any flood to it stands out.
		base := baseRate[d]
		if len(baseline) == 0 {
			base = quietRate(bins)
		}
		limit := max(cfg.Floor, cfg.Multiple*base)
		a := Attack{Dest: d, BaselineRate: base}
		n, secsOver, from, to := 0, 0, -1, -1 // the attack's packets and seconds
		for s, c := range bins {
			if float64(c) > limit {
				n += c
				secsOver++
				to = s
				if from < 0 {
					from = s
				}
			}
		}
		if from < 0 {
			continue
		}
		a.Start = start.Add(time.Duration(from) * time.Second)
		a.End = start.Add(time.Duration(to+1) * time.Second)
		inAttack := func(s *Sample) bool { return float64(bins[int(s.Time.Sub(start)/time.Second)]) > limit }
		for i := range capture {
			s := &capture[i]
			switch {
			case s.Dst != d:
			case inAttack(s):
				a.Samples = append(a.Samples, *s)
			case len(baseline) == 0:
				a.Normal = append(a.Normal, *s)
			}
		}
		for i := range baseline {
			if baseline[i].Dst == d {
				a.Normal = append(a.Normal, baseline[i])
			}
		}
		a.Rate = float64(n) / float64(secsOver)
		attacks = append(attacks, a)
	}
	slices.SortFunc(attacks, func(a, b Attack) int {
		return cmp.Or(len(b.Samples)-len(a.Samples), cmp.Compare(a.Dest.String(), b.Dest.String()))
	})
	return attacks
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// ratesOf is each destination's packet rate over samples' span.
func ratesOf(samples []Sample) map[Dest]float64 {
	if len(samples) == 0 {
		return nil
	}
	first, last := samples[0].Time, samples[0].Time
	for i := range samples {
		first, last = minTime(first, samples[i].Time), maxTime(last, samples[i].Time)
	}
	span := max(last.Sub(first), time.Second).Seconds()
	r := map[Dest]float64{}
	for i := range samples {
		r[samples[i].Dst]++
	}
	for d := range r {
		r[d] /= span
	}
	return r
}

// quietRate is the mean rate of the quietest quarter of bins (at least one).
func quietRate(bins []int) float64 {
	s := slices.Clone(bins)
	slices.Sort(s)
	q := max(len(s)/4, 1)
	sum := 0
	for _, c := range s[:q] {
		sum += c
	}
	return float64(sum) / float64(q)
}
