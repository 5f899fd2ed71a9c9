// SPDX-License-Identifier: Apache-2.0

package autopilot

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gopacket/gopacket/layers"
)

// Generated is a rule the pilot wrote for an attack: the fingerprint's
// part a rule can match (Preds) and the rest (Left), the evidence, and its
// life.
type Generated struct {
	Name  string
	Dest  Dest
	Preds []Predicate
	Left  []Predicate
	// Coverage and BaselineShare are the shares of the attack's and of
	// the normal traffic's samples Preds match; AttackSamples and
	// BaselineSamples count them.
	Coverage, BaselineShare        float64
	AttackSamples, BaselineSamples int
	// Rate is what the rule holds its packets to, per second, in all.
	Rate uint64
	// Shadow: the rule counts what it would drop.
	Shadow bool
	// Created is when the rule was written, Enforced when it was first
	// in force in the datapath (zero until then), LastAttack when its
	// attack was last above its threshold.
	Created, Enforced, LastAttack time.Time
	// Kept: an operator keeps it; it outlives its attack.
	Kept bool
	// Baseline is its destination's normal rate, packets per second, when
	// the rule was written.
	Baseline float64
}

// Evidence is the rule's fingerprint and what it rests on, in words.
func (g *Generated) Evidence() string {
	s := fmt.Sprintf("%s (%.1f%% of %d attack samples, %.2f%% of %d normal samples)",
		Describe(g.Preds, true), 100*g.Coverage, g.AttackSamples, 100*g.BaselineShare, g.BaselineSamples)
	if len(g.Left) > 0 {
		s += "; also shared, not matched by rules: " + Describe(g.Left, true)
	}
	return s
}

// YAML is the rule as an item of a policy's rules: list.
func (g *Generated) YAML() string {
	fp := Fingerprint{Dest: g.Dest, Preds: g.Preds}
	y := fp.Rule(g.Name, g.Rate)
	if g.Shadow {
		y += "    action: shadow\n"
	}
	return y
}

// Rules are the generated rules in force, oldest first.
func (p *Pilot) Rules() []*Generated { return slices.Clone(p.rules) }

// ErrNoSuchRule: no generated rule has that name.
var ErrNoSuchRule = errors.New("no generated rule of that name")

// Keep makes the rule named name outlive its attack, until removed.
func (p *Pilot) Keep(name string) (*Generated, error) {
	for _, g := range p.rules {
		if g.Name == name {
			g.Kept = true
			return g, nil
		}
	}
	return nil, fmt.Errorf("%w: %q", ErrNoSuchRule, name)
}

// Remove removes the rule named name. While its attack goes on no other
// rule is written for that destination: the operator judged it.
func (p *Pilot) Remove(name string) (*Generated, error) {
	i := slices.IndexFunc(p.rules, func(g *Generated) bool { return g.Name == name })
	if i < 0 {
		return nil, fmt.Errorf("%w: %q", ErrNoSuchRule, name)
	}
	g := p.rules[i]
	p.rules = slices.Delete(p.rules, i, i+1)
	if d := p.dests[g.Dest]; d != nil && d.attack != nil {
		d.attack.dismissed = true
	}
	return g, nil
}

// Drop forgets the rules named in names without judging their attacks:
// rules the policy now has rules of the same name for (an operator pasted
// them in), or that it could not compile.
// Their attacks get no other rule until they end: another would meet the
// same fate.
func (p *Pilot) Drop(names ...string) {
	p.rules = slices.DeleteFunc(p.rules, func(g *Generated) bool {
		if !slices.Contains(names, g.Name) {
			return false
		}
		if d := p.dests[g.Dest]; d != nil && d.attack != nil {
			d.attack.dismissed = true
		}
		return true
	})
}

// Restore takes back the rules an earlier pilot left (a restarted attach
// process): each keeps its attack open as of its LastAttack, so that it
// expires as it would have.
func (p *Pilot) Restore(rules []*Generated) {
	for _, g := range rules {
		if slices.ContainsFunc(p.rules, func(h *Generated) bool { return h.Name == g.Name }) {
			continue
		}
		g.Shadow = p.cfg.Shadow
		p.rules = append(p.rules, g)
		d := p.dests[g.Dest]
		if d == nil {
			d = &destState{normal: ring{n: destNormal}}
			p.dests[g.Dest] = d
		}
		if d.attack == nil || d.attack.lastOver.Before(g.LastAttack) {
			d.attack = &attack{since: g.Created, lastOver: g.LastAttack}
		}
		// The destination's baseline as the rule found it: its attack is
		// judged from the first second, not after a learning period in
		// which the flood would pass for normal traffic.
		d.base, d.restored = max(d.base, g.Baseline), true
		var n int
		if _, err := fmt.Sscanf(g.Name[strings.LastIndexByte(g.Name, '-')+1:], "%d", &n); err == nil {
			p.seq = max(p.seq, n)
		}
	}
}

// Attacks are the attacks in progress, by destination.
func (p *Pilot) Attacks() []AttackState {
	var out []AttackState
	for dst, d := range p.dests {
		if a := d.attack; a != nil {
			s := AttackState{Dest: dst, Since: a.since, LastOver: a.lastOver, Peak: a.peak, Baseline: d.base,
				Dismissed: a.dismissed}
			if a.lastNo != nil {
				s.NoRule = a.lastNo.Error()
			}
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b AttackState) int { return a.Since.Compare(b.Since) })
	return out
}

// AttackState is an attack in progress, as listed.
type AttackState struct {
	Dest            Dest
	Since, LastOver time.Time
	Peak, Baseline  float64
	// NoRule is why its last fingerprint gave no rule ("" when it has
	// one, or none was tried yet); Dismissed that an operator removed its
	// rule.
	NoRule    string
	Dismissed bool
}

func protoName(d Dest) string {
	switch d.Proto {
	case layers.IPProtocolTCP:
		return "tcp"
	case layers.IPProtocolUDP:
		return "udp"
	}
	return strings.ToLower(d.Proto.String())
}
