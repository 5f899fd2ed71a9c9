// SPDX-License-Identifier: Apache-2.0

package replay

import (
	"cmp"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/model"
	"github.com/xdplimit/xdplimit/policy"
)

// The reference the replay tests compare the program with: the Go models
// (package model), one model.State per key as the datapath keeps one entry
// per key, judged in the datapath's evaluation order.

// mLevel is one level of a rule as the test states it, independently of
// the policy text.
type mLevel struct {
	params model.Params
	bytes  bool
	kind   policy.KeyKind
	p4, p6 int
}

func tokenBucket(t *testing.T, count uint64, per time.Duration, burst uint64, bytes bool) model.Params {
	t.Helper()
	p, err := model.TokenBucketParams(count, per, burst, bytes)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func window(t *testing.T, alg uint8, limit uint64, w time.Duration) model.Params {
	t.Helper()
	p, err := model.WindowParams(alg, limit, w)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

type mRule struct {
	name   string
	shadow bool
	levels []mLevel // in policy order: own limit, then aggregates
}

// refModel judges packets with the reference models.
type refModel struct {
	rules  []mRule
	states map[mKey]*model.State
}

type mKey struct {
	rule, level int
	src         netip.Addr
	port        uint16
}

func newModel(rules ...mRule) *refModel {
	return &refModel{rules: rules, states: map[mKey]*model.State{}}
}

// evalOrder is the datapath's documented evaluation order: the levels
// that stop a flood cheapest first, global, then shorter source prefixes,
// then source+port keys; ties keep policy order.
func evalOrder(levels []mLevel) []int {
	rank := func(l mLevel) int {
		switch l.kind {
		case policy.KeyGlobal:
			return 0
		case policy.KeySrcIP:
			return 1 + l.p4
		}
		return 64 + l.p4
	}
	idx := make([]int, len(levels))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(rank(levels[a]), rank(levels[b])) })
	return idx
}

// judge returns the refusing level in policy order, or -1 when the packet
// conforms on every level. A packet is charged on no level unless every
// level admits it, as the datapath checks all levels before it commits.
func (m *refModel) judge(rule int, src netip.Addr, port uint16, now uint64, size int) int {
	r := m.rules[rule]
	keys := make([]mKey, len(r.levels))
	for _, i := range evalOrder(r.levels) {
		l := r.levels[i]
		k := mKey{rule: rule, level: i}
		if l.kind != policy.KeyGlobal {
			bits := l.p6
			if src.Is4() {
				bits = l.p4
			}
			k.src = netip.PrefixFrom(src, bits).Masked().Addr()
			if l.kind == policy.KeySrcIPDstPort || l.kind == policy.KeySrcIPSrcPort {
				k.port = port
			}
		}
		keys[i] = k
		s := m.states[k]
		if s == nil {
			s = &model.State{}
		}
		trial := *s
		if !trial.Admit(l.params, now, cost(l, size)) {
			return i
		}
	}
	for i, l := range r.levels {
		s := m.states[keys[i]]
		if s == nil {
			s = &model.State{}
			m.states[keys[i]] = s
		}
		s.Admit(l.params, now, cost(l, size))
	}
	return -1
}

// clockOf is the time a frame runs at: the first frame of the capture at
// ClockStart, the others as far after it as they were captured.
func clockOf(frames []rec, f rec) uint64 {
	return uint64(ClockStart + f.at - frames[0].at)
}

func cost(l mLevel, size int) uint64 {
	if l.bytes {
		return uint64(size)
	}
	return 1
}

// expected computes the report the program should produce, from the
// model for rule traffic and from the test's own labels for the rest.
func expected(p *policy.Policy, m *refModel, frames []rec, top int) *Report {
	want := &Report{Rules: make([]RuleResult, len(m.rules))}
	for i, r := range m.rules {
		want.Rules[i] = RuleResult{Name: r.name, Line: p.Rules[i].Line, Refused: make([]uint64, len(r.levels))}
	}
	drops := map[sourceRule]*SourceDrops{}
	for _, f := range frames {
		n := len(f.data)
		switch f.why {
		case maps.WhyAllow:
			want.Allow.add(n)
		case maps.WhyDeny:
			want.Deny.add(n)
			addDrop(drops, f.src, -1, "deny list", n, p.Mode == policy.ModeShadow)
		case maps.WhyUnmatched:
			want.Unmatched.add(n)
		case maps.WhyMalformed:
			want.Malformed.add(n)
			if n < ethHeaderLen {
				want.Short.add(n)
			}
		case maps.WhyNonIP:
			want.NonIP.add(n)
		case maps.WhyRule:
			rr := &want.Rules[f.rule]
			refused := m.judge(f.rule, f.src, f.port, clockOf(frames, f), n)
			switch {
			case refused < 0:
				rr.Pass.add(n)
			case m.rules[f.rule].shadow:
				rr.Shadow.add(n)
			default:
				rr.Drop.add(n)
			}
			if refused >= 0 {
				rr.Refused[refused]++
				addDrop(drops, f.src, f.rule, rr.Name, n, m.rules[f.rule].shadow)
			}
		}
		if f.wire > len(f.data) {
			want.Truncated++
		}
	}
	want.Frames = len(frames)
	want.Top = topDrops(drops, top)
	return want
}

func addDrop(drops map[sourceRule]*SourceDrops, src netip.Addr, rule int, name string, n int, shadow bool) {
	k := sourceRule{src, rule}
	d := drops[k]
	if d == nil {
		d = &SourceDrops{Source: src, Rule: name}
		drops[k] = d
	}
	if shadow {
		d.Shadow.add(n)
	} else {
		d.Drop.add(n)
	}
}
