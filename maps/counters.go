// SPDX-License-Identifier: Apache-2.0

package maps

import (
	"fmt"

	"github.com/xdplimit/xdplimit/gen"
)

// CounterValue is a packets/bytes pair summed over CPUs.
type CounterValue struct{ Packets, Bytes uint64 }

func sumCounters(vals []gen.XdplimitXdplCounter) CounterValue {
	var c CounterValue
	for _, v := range vals {
		c.Packets += v.Packets
		c.Bytes += v.Bytes
	}
	return c
}

// Counters reads the global counters, summed over CPUs.
func (l *Limiter) Counters() (map[Counter]CounterValue, error) {
	out := make(map[Counter]CounterValue, nCounters)
	var vals []gen.XdplimitXdplCounter
	for i := 0; i < nCounters; i++ {
		if err := l.objs.XdplCounters.Lookup(uint32(i), &vals); err != nil {
			return nil, fmt.Errorf("reading counter %v: %w", Counter(i), err)
		}
		out[Counter(i)] = sumCounters(vals)
	}
	return out, nil
}

// RuleStat is one rule of the policy in force and its counters.
type RuleStat struct {
	Name       string
	Index      int
	Verdicts   [nVerdicts]CounterValue // by Verdict
	LevelDrops []uint64                // drops by the level that refused, in evaluation order
	// SynCookie: the rule answers SYNs over its limit with cookies.
	// CookieACKs counts its ACKs to a listener by the cookie they carried
	// back: [0] valid (passed on), [1] not (dropped).
	SynCookie  bool
	CookieACKs [2]uint64
	// Reject: the rule answers packets over its limit with a reset or an
	// ICMP error; its answers sent are Verdicts[VerdictReject], and
	// RejectSuppressed counts those it dropped unanswered (in
	// Verdicts[VerdictDrop] too).
	Reject           bool
	RejectSuppressed uint64
}

// Active returns the generation in force and its configuration.
func (l *Limiter) active() (uint32, gen.XdplimitXdplControl, error) {
	var ctl gen.XdplimitXdplControl
	if err := l.objs.XdplCtl.Lookup(uint32(0), &ctl); err != nil {
		return 0, ctl, fmt.Errorf("reading the control map: %w", err)
	}
	return ctl.Active & 1, ctl, nil
}

func (l *Limiter) rule(g uint32, i int) (gen.XdplimitXdplRule, error) {
	var r gen.XdplimitXdplRule
	err := l.objs.XdplRules.Lookup(g*uint32(MaxRules)+uint32(i), &r)
	return r, err
}

func (l *Limiter) name(slot uint32) (string, error) {
	var n gen.XdplimitXdplName
	if err := l.objs.XdplNames.Lookup(slot, &n); err != nil {
		return "", err
	}
	b := make([]byte, 0, NameLen)
	for _, c := range n.Name {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b), nil
}

// inForce reads the rules of generation g, in policy order.
func (l *Limiter) inForce(g uint32, ctl gen.XdplimitXdplControl) ([]installed, error) {
	var out []installed
	for i := 0; i < int(ctl.Gen[g].Nrules) && i < MaxRules; i++ {
		r, err := l.rule(g, i)
		if err != nil {
			return nil, err
		}
		name, err := l.name(r.CounterSlot)
		if err != nil {
			return nil, err
		}
		out = append(out, installed{name: name, slot: r.CounterSlot, levels: r.Levels[:r.Nlevels], flags: r.Flags})
	}
	return out, nil
}

// current reads the rules of the generation in force, in policy order.
func (l *Limiter) current() ([]installed, error) {
	g, ctl, err := l.active()
	if err != nil {
		return nil, err
	}
	return l.inForce(g, ctl)
}

// RuleStats reads the counters of the rules in force, in policy order.
func (l *Limiter) RuleStats() ([]RuleStat, error) {
	rules, err := l.current()
	if err != nil {
		return nil, err
	}
	var out []RuleStat
	var vals []gen.XdplimitXdplRuleStats
	for i, r := range rules {
		if err := l.objs.XdplStats.Lookup(r.slot, &vals); err != nil {
			return nil, err
		}
		rs := RuleStat{Name: r.name, Index: i, LevelDrops: make([]uint64, len(r.levels)), SynCookie: r.flags&rfSynCookie != 0,
			Reject: r.flags&rfReject != 0}
		for _, v := range vals {
			for k := range rs.Verdicts {
				rs.Verdicts[k].Packets += v.V[k].Packets
				rs.Verdicts[k].Bytes += v.V[k].Bytes
			}
			for k := range rs.LevelDrops {
				rs.LevelDrops[k] += v.LevelDrops[k]
			}
			for k := range rs.CookieACKs {
				rs.CookieACKs[k] += v.CookieAcks[k]
			}
			rs.RejectSuppressed += v.RejectSuppressed
		}
		out = append(out, rs)
	}
	return out, nil
}

// SlotNames maps counter slots to the names of the rules in force.
func (l *Limiter) SlotNames() (map[uint32]string, error) {
	rules, err := l.current()
	if err != nil {
		return nil, err
	}
	out := map[uint32]string{}
	for _, r := range rules {
		out[r.slot] = r.name
	}
	return out, nil
}
