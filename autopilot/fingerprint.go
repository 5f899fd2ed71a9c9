// SPDX-License-Identifier: Apache-2.0

package autopilot

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Config is what a fingerprint must achieve.
type Config struct {
	// Coverage is the share of the attack's samples the fingerprint must
	// match (default 0.95).
	Coverage float64
	// BaselineMax is the largest share of the baseline's samples (normal
	// traffic to the same destination) it may match (default 0.001).
	BaselineMax float64
	// MinSamples is the fewest attack samples to judge from (default 100).
	MinSamples int
}

func (c Config) withDefaults() Config {
	if c.Coverage <= 0 {
		c.Coverage = 0.95
	}
	if c.BaselineMax <= 0 {
		c.BaselineMax = 0.001
	}
	if c.MinSamples <= 0 {
		c.MinSamples = 100
	}
	return c
}

// Fingerprint is what an attack's packets share: every predicate holds for
// a packet it matches.
type Fingerprint struct {
	Dest  Dest
	Preds []Predicate
	// Coverage and BaselineShare are the shares of the attack's and of
	// the baseline's samples it matches; Attack and Baseline count them.
	Coverage, BaselineShare float64
	Attack, Baseline        int
	// Part is the share of the attack's samples that are the attack's
	// own (FindPart): Coverage is of that part.
	Part float64
}

func (f Fingerprint) String() string {
	return fmt.Sprintf("%v: %s (%.1f%% of %d attack samples, %.2f%% of %d baseline samples)",
		f.Dest, Describe(f.Preds, true), 100*f.Coverage, f.Attack, 100*f.BaselineShare, f.Baseline)
}

// Describe lists preds (sorted by field), with their values or not; runs
// of payload bytes read as one, "payload[2..5] 0100 0001".
func Describe(preds []Predicate, values bool) string {
	var parts []string
	for i := 0; i < len(preds); i++ {
		p := preds[i]
		j := i
		for p.Field >= FieldPayload && j+1 < len(preds) && preds[j+1].Field == preds[j].Field+1 {
			j++
		}
		switch {
		case j == i && values:
			parts = append(parts, p.String())
		case j == i:
			parts = append(parts, p.Field.String())
		default:
			s := fmt.Sprintf("payload[%d..%d]", p.Field-FieldPayload, preds[j].Field-FieldPayload)
			if values {
				s += " "
				for _, q := range preds[i : j+1] {
					s += fmt.Sprintf("%02x", q.Lo)
				}
			}
			parts = append(parts, s)
		}
		i = j
	}
	return strings.Join(parts, ", ")
}

var (
	// ErrNoTrait: nothing the attack shares sets it apart from normal
	// traffic; a rule would drop real clients.
	ErrNoTrait = errors.New("the attack shares no trait that normal traffic to it lacks")
	// ErrTooFew: too few samples of the attack, or none of normal traffic,
	// to judge.
	ErrTooFew = errors.New("too few samples to judge")
)

// Find returns the most specific fingerprint of attack, samples of packets
// to dst during the attack, that matches at least cfg.Coverage of them and
// at most cfg.BaselineMax of baseline, samples of normal traffic to dst.
// Each field is pinned to the value (or, for TTL and length, the narrowest
// band) that most of the attack shares; the pins are then joined, the
// rarest in the baseline first, as long as the join still covers the
// attack.
func Find(dst Dest, attack, baseline []Sample, cfg Config) (Fingerprint, error) {
	cfg = cfg.withDefaults()
	fp := Fingerprint{Dest: dst, Attack: len(attack), Baseline: len(baseline), Part: 1}
	if len(attack) < cfg.MinSamples || len(baseline) == 0 {
		return fp, fmt.Errorf("%w: %d attack samples (at least %d) and %d of normal traffic",
			ErrTooFew, len(attack), cfg.MinSamples, len(baseline))
	}
	need := int(math.Ceil(cfg.Coverage * float64(len(attack))))
	var cands []Predicate
	for f := Field(0); f < numFields; f++ {
		if p, ok := pin(f, attack, need); ok {
			cands = append(cands, p)
		}
	}
	rarity := make(map[Field]int, len(cands))
	for _, p := range cands {
		rarity[p.Field] = count(baseline, []Predicate{p})
	}
	slices.SortStableFunc(cands, func(a, b Predicate) int { return rarity[a.Field] - rarity[b.Field] })
	for _, p := range cands {
		if count(attack, append(fp.Preds, p)) >= need {
			fp.Preds = append(fp.Preds, p)
		}
	}
	slices.SortFunc(fp.Preds, func(a, b Predicate) int { return int(a.Field) - int(b.Field) })
	fp.Coverage = float64(count(attack, fp.Preds)) / float64(len(attack))
	fp.BaselineShare = float64(count(baseline, fp.Preds)) / float64(len(baseline))
	if len(fp.Preds) == 0 || fp.BaselineShare > cfg.BaselineMax {
		return fp, ErrNoTrait
	}
	return fp, nil
}

// FindPart is Find over samples of which only the part share is the
// attack's own, the rest its destination's normal traffic at the baseline
// rate, which a fingerprint of the attack need not match: the coverage
// asked for, and the one reported, are of that part. An attack at ten
// times its baseline is a tenth normal traffic, which asking 95% of every
// sample would leave without a fingerprint. share is held to at least
// minAttackShare, so that a baseline's error cannot ask for nothing.
func FindPart(dst Dest, samples, baseline []Sample, share float64, cfg Config) (Fingerprint, error) {
	cfg = cfg.withDefaults()
	share = min(max(share, minAttackShare), 1)
	part := cfg
	part.Coverage *= share
	fp, err := Find(dst, samples, baseline, part)
	fp.Coverage, fp.Part = min(fp.Coverage/share, 1), share
	return fp, err
}

// pin is f's predicate over the attack: the value at least need samples
// share, or the narrowest band within f's width that need samples fall in.
func pin(f Field, attack []Sample, need int) (Predicate, bool) {
	vals := make([]uint64, 0, len(attack))
	var text string
	for i := range attack {
		if v, ok := f.value(&attack[i]); ok {
			vals = append(vals, v)
		}
	}
	if len(vals) < need {
		return Predicate{}, false
	}
	slices.Sort(vals)
	best, lo := uint64(math.MaxUint64), uint64(0)
	for i := 0; i+need <= len(vals); i++ {
		if w := vals[i+need-1] - vals[i]; w < best {
			best, lo = w, vals[i]
		}
	}
	if best > f.band() {
		return Predicate{}, false
	}
	if f == FieldOptions {
		for i := range attack {
			if v, ok := f.value(&attack[i]); ok && v == lo {
				text = "[" + attack[i].Options + "]"
				break
			}
		}
	}
	return Predicate{Field: f, Lo: lo, Hi: lo + best, Text: text}, true
}

// count is how many samples every predicate matches.
func count(samples []Sample, preds []Predicate) int {
	n := 0
	for i := range samples {
		if matchesAll(&samples[i], preds) {
			n++
		}
	}
	return n
}

// matchesAll: whether every predicate matches s.
func matchesAll(s *Sample, preds []Predicate) bool {
	for _, p := range preds {
		if !p.matches(s) {
			return false
		}
	}
	return true
}
