// SPDX-License-Identifier: Apache-2.0

package autopilot

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// LiveConfig is how a Pilot decides: when a destination is under attack,
// what a fingerprint must achieve, and what becomes of its rules.
type LiveConfig struct {
	Detect DetectConfig
	Find   Config
	// Learning is how long the pilot watches before it declares any
	// attack: the baselines need that much normal traffic.
	Learning time.Duration
	// Expire is how long an attack must stay below its threshold before
	// its rules are removed.
	Expire time.Duration
	// MaxRules bounds the generated rules in force at once.
	MaxRules int
	// Shadow writes rules that count what they would drop; Limit holds
	// what they match to the destination's baseline rate rather than to
	// one packet a second.
	Shadow, Limit bool
}

// The bounds of what a pilot remembers, whatever the traffic: the
// destinations it keeps a baseline for, and the normal samples of each
// and of the host.
const (
	maxDests      = 1024
	destNormal    = 1024 // samples of normal traffic kept per destination
	hostNormal    = 4096 // and for the whole host
	minBaseline   = 200  // fewer normal samples to a destination: the host's judge
	maxAttackKeep = 8192 // attack samples kept while too few to judge
	maxPending    = 8192 // samples kept of one destination's interval
	// minAttackShare bounds how little of an attack interval's samples
	// may be the attack's: an attack is at least Multiple (>= 1.5) times
	// its baseline, so a third, and less only by a baseline's error.
	minAttackShare = 0.2
	// tau is the baseline rate's time constant: a destination's normal
	// rate moves with its traffic over minutes, not seconds.
	tau = 60 * time.Second
	// holdBack is how many quiet intervals wait before they are learned.
	holdBack = 3
)

// Pilot is the live loop's state: per destination a baseline (an EWMA of
// its packet rate and its recent normal samples) and the attack in
// progress, and the rules it generated. It does no I/O: samples go in
// with Add, decisions come out of Tick, and time is the caller's.
type Pilot struct {
	cfg   LiveConfig
	start time.Time // the first Tick
	last  time.Time // the previous Tick
	dests map[Dest]*destState
	host  ring // normal samples to any destination
	rules []*Generated
	seq   int
	rng   *rand.Rand // which samples an interval keeps past maxPending
}

type destState struct {
	base    float64 // packets per second, EWMA
	since   time.Time
	seen    time.Time
	count   float64  // packets since the last Tick (samples scaled)
	pending []Sample // samples since the last Tick (at most maxPending)
	nseen   int      // samples since the last Tick
	normal  ring
	held    []quiet
	attack  *attack
	// restored: its baseline came with a restored rule, and counts from
	// the first Tick.
	restored bool
}

// attack is a destination's attack in progress.
type attack struct {
	since, lastOver time.Time
	peak            float64
	samples         []Sample // not yet covered by a rule, until enough to judge
	normal          float64  // how many of them are normal traffic, by the baseline's rate
	lastNo          error    // the last reason no rule was written, logged once
	dismissed       bool     // an operator removed its rule: none until it ends
}

// NewPilot starts a pilot with cfg (zero fields take their defaults)
// and the rules an earlier one left (Restore).
func NewPilot(cfg LiveConfig) *Pilot {
	cfg.Detect = cfg.Detect.withDefaults()
	cfg.Find = cfg.Find.withDefaults()
	cfg.MaxRules = cmp.Or(cfg.MaxRules, 8)
	cfg.Expire = cmp.Or(cfg.Expire, time.Minute)
	return &Pilot{cfg: cfg, dests: map[Dest]*destState{}, host: ring{n: hostNormal},
		rng: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}
}

// Configure changes the pilot's knobs, keeping what it learned.
func (p *Pilot) Configure(cfg LiveConfig) {
	start, last, dests, host, rules, seq, rng := p.start, p.last, p.dests, p.host, p.rules, p.seq, p.rng
	*p = *NewPilot(cfg)
	p.start, p.last, p.dests, p.host, p.rules, p.seq, p.rng = start, last, dests, host, rules, seq, rng
	for _, g := range p.rules {
		g.Shadow = p.cfg.Shadow
	}
}

// Add counts samples received since the last Tick; each stands for scale
// packets (the sampling's one in N, times the share the rings lost).
func (p *Pilot) Add(samples []Sample, scale float64) {
	for i := range samples {
		s := &samples[i]
		d := p.dests[s.Dst]
		if d == nil {
			if len(p.dests) >= maxDests && !p.evict() {
				continue // every kept destination is under attack
			}
			d = &destState{normal: ring{n: destNormal}}
			p.dests[s.Dst] = d
		}
		d.count += scale
		// A uniform sample of the interval's samples, bounded: under a
		// flood sampled densely the rings deliver far more than a
		// fingerprint needs.
		d.nseen++
		if len(d.pending) < maxPending {
			d.pending = append(d.pending, *s)
		} else if i := p.rng.IntN(d.nseen); i < maxPending {
			d.pending[i] = *s
		}
	}
}

// evict forgets the destination seen longest ago that has no attack.
func (p *Pilot) evict() bool {
	var old Dest
	var at time.Time
	found := false
	for k, d := range p.dests {
		if d.attack == nil && (!found || d.seen.Before(at)) {
			old, at, found = k, d.seen, true
		}
	}
	if found {
		delete(p.dests, old)
	}
	return found
}

// EventKind is what a Tick decided.
type EventKind int

const (
	EventAttack  EventKind = iota // a destination crossed its threshold
	EventRule                     // a rule was generated
	EventNoRule                   // an attack got no rule (Err says why)
	EventEnded                    // an attack stayed below its threshold for Expire
	EventRemoved                  // a rule was removed (its attack ended, or an operator)
)

func (k EventKind) String() string {
	return [...]string{"attack", "rule", "no_rule", "ended", "removed"}[k]
}

// Event is one decision, for the log and the metrics.
type Event struct {
	Kind     EventKind
	Dest     Dest
	Rate     float64 // packets per second in the last interval
	Baseline float64
	Rule     *Generated
	Err      error
}

func (e Event) String() string {
	switch e.Kind {
	case EventAttack:
		return fmt.Sprintf("attack on %v: %.0f packets/s against a baseline of %.0f", e.Dest, e.Rate, e.Baseline)
	case EventRule:
		return fmt.Sprintf("rule %s for %v: %s", e.Rule.Name, e.Dest, e.Rule.Evidence())
	case EventNoRule:
		return fmt.Sprintf("no rule for the attack on %v: %v", e.Dest, e.Err)
	case EventEnded:
		return fmt.Sprintf("attack on %v ended", e.Dest)
	}
	return fmt.Sprintf("rule %s for %v removed", e.Rule.Name, e.Dest)
}

// Why no rule was written for an attack, beside ErrNoTrait and ErrTooFew.
var (
	ErrNoRoom     = errors.New("the generated rules are at their limit (max_rules)")
	ErrUnmatched  = errors.New("what the attack shares is only what rules cannot match (tcp window, options, ip id)")
	ErrNoBaseline = errors.New("too little normal traffic seen yet to tell the attack from it")
)

// Tick closes the interval since the previous Tick: each destination's rate
// over it against its threshold, attacks declared and fingerprinted,
// rules written and removed. changed is whether the rules changed.
func (p *Pilot) Tick(now time.Time) (events []Event, changed bool) {
	if p.start.IsZero() {
		p.start, p.last = now, now
		for _, d := range p.dests {
			d.count, d.pending, d.nseen = 0, nil, 0
		}
		return nil, false
	}
	dur := now.Sub(p.last).Seconds()
	p.last = now
	if dur <= 0 {
		return nil, false
	}
	// The baselines lag by the intervals held back.
	learned := now.Sub(p.start) >= p.cfg.Learning+holdBack*time.Second
	for dst, d := range p.dests {
		rate := d.count / dur
		if d.count > 0 {
			d.seen = now
		}
		if d.since.IsZero() {
			d.since = now.Add(-time.Duration(dur * float64(time.Second)))
		}
		limit := max(p.cfg.Detect.Floor, p.cfg.Detect.Multiple*d.base)
		switch {
		case (learned || d.restored) && rate > limit:
			ev, ch := p.over(now, dst, d, rate)
			events, changed = append(events, ev...), changed || ch
		case d.attack == nil:
			p.learn(now, d, rate, dur)
		}
		d.count, d.pending, d.nseen = 0, nil, 0
	}
	ev, ch := p.expire(now)
	return append(events, ev...), changed || ch
}

// over handles an interval in which d's rate crossed its threshold.
func (p *Pilot) over(now time.Time, dst Dest, d *destState, rate float64) (events []Event, changed bool) {
	d.held = nil // the onset's intervals, if any, are not learned
	a := d.attack
	if a == nil {
		a = &attack{since: now}
		d.attack = a
		events = append(events, Event{Kind: EventAttack, Dest: dst, Rate: rate, Baseline: d.base})
	}
	a.lastOver, a.peak = now, max(a.peak, rate)
	if a.dismissed {
		return events, false
	}
	// What the rules for d already match is held: only the rest of the
	// attack (a first wave, or one that rotated its fingerprint) is judged.
	// The interval's normal traffic, at the baseline's rate, is among
	// the samples too, and no rule matches it.
	uncovered := d.pending[:0:0]
	for _, s := range d.pending {
		if !p.covered(dst, &s) {
			uncovered = append(uncovered, s)
		}
	}
	normal := float64(len(d.pending)) * min(d.base/rate, 1)
	if float64(len(uncovered))-normal <= (1-p.cfg.Find.Coverage)*(float64(len(d.pending))-normal) {
		a.samples, a.normal = nil, 0
		return events, false
	}
	a.samples = append(a.samples, uncovered...)
	a.normal += normal
	if n := len(a.samples); n > maxAttackKeep {
		a.normal *= float64(maxAttackKeep) / float64(n)
		a.samples = slices.Clone(a.samples[n-maxAttackKeep:])
	}
	if len(a.samples) < p.cfg.Find.MinSamples {
		return events, false
	}
	g, err := p.generate(dst, d, a.samples, 1-a.normal/float64(len(a.samples)))
	a.samples, a.normal = nil, 0
	if err != nil {
		if a.lastNo == nil || a.lastNo.Error() != err.Error() {
			events = append(events, Event{Kind: EventNoRule, Dest: dst, Rate: rate, Baseline: d.base, Err: err})
		}
		a.lastNo = err
		return events, false
	}
	a.lastNo = nil
	p.rules = append(p.rules, g)
	return append(events, Event{Kind: EventRule, Dest: dst, Rate: rate, Baseline: d.base, Rule: g}), true
}

// covered: whether a rule generated for dst matches s.
func (p *Pilot) covered(dst Dest, s *Sample) bool {
	for _, g := range p.rules {
		if g.Dest == dst && matchesAll(s, g.Preds) {
			return true
		}
	}
	return false
}

// generate fingerprints an attack's samples against d's normal traffic
// (or the host's, while d has too little) and writes the rule. share is
// the part of the samples the attack's own (the rest is normal traffic
// at its baseline rate): the coverage asked for is of that part.
func (p *Pilot) generate(dst Dest, d *destState, samples []Sample, share float64) (*Generated, error) {
	normal := d.normal.buf
	if len(normal) < minBaseline {
		normal = p.host.buf
	}
	if len(normal) < minBaseline {
		return nil, ErrNoBaseline
	}
	fp, err := FindPart(dst, samples, normal, share, p.cfg.Find)
	if errors.Is(err, ErrNoTrait) && len(fp.Preds) > 0 {
		return nil, fmt.Errorf("%w (what it shares, %s, is in %.2f%% of the normal samples)", err,
			Describe(fp.Preds, true), 100*fp.BaselineShare)
	}
	if err != nil {
		return nil, err
	}
	// The rule matches only part of the fingerprint: that part alone must
	// still cover the attack and spare the normal traffic.
	in, _ := fp.Matchable()
	cov, base := min(Share(samples, in)/fp.Part, 1), Share(normal, in)
	if len(in) == 0 || cov < p.cfg.Find.Coverage || base > p.cfg.Find.BaselineMax {
		return nil, fmt.Errorf("%w: %s", ErrUnmatched, Describe(fp.Preds, true))
	}
	if len(p.rules) >= p.cfg.MaxRules {
		return nil, ErrNoRoom
	}
	p.seq++
	rate := uint64(1)
	if p.cfg.Limit {
		rate = uint64(math.Ceil(d.base))
	}
	g := &Generated{Name: fmt.Sprintf("autopilot-%s%d-%d", protoName(dst), dst.Port, p.seq), Dest: dst,
		Preds: in, Coverage: cov, BaselineShare: base, AttackSamples: len(samples),
		BaselineSamples: len(normal), Rate: rate, Shadow: p.cfg.Shadow, Created: p.last, LastAttack: p.last,
		Baseline: d.base}
	g.Left = slices.DeleteFunc(slices.Clone(fp.Preds), func(q Predicate) bool { return q.matchable() })
	return g, nil
}

// expire ends attacks that stayed below their threshold for Expire, and
// removes their rules (but those an operator keeps).
func (p *Pilot) expire(now time.Time) (events []Event, changed bool) {
	for dst, d := range p.dests {
		if a := d.attack; a != nil && now.Sub(a.lastOver) >= p.cfg.Expire {
			d.attack = nil
			events = append(events, Event{Kind: EventEnded, Dest: dst, Baseline: d.base})
		}
	}
	p.rules = slices.DeleteFunc(p.rules, func(g *Generated) bool {
		d := p.dests[g.Dest]
		if d != nil && d.attack != nil {
			g.LastAttack = d.attack.lastOver
			return false
		}
		if g.Kept {
			return false
		}
		events = append(events, Event{Kind: EventRemoved, Dest: g.Dest, Rule: g})
		changed = true
		return true
	})
	return events, changed
}
