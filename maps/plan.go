// SPDX-License-Identifier: Apache-2.0

package maps

import (
	"fmt"

	"github.com/xdplimit/xdplimit/gen"
)

// installed is a rule of the generation in force, for carrying state ids
// and counter slots over a reload.
type installed struct {
	name   string
	slot   uint32
	levels []gen.XdplimitXdplLevel
	flags  uint8 // XDPL_RF_*
}

// planInput is everything that decides what Apply writes: the new policy,
// the rules in force (in policy order), the next free state id and the
// load-time settings that set level flags.
type planInput struct {
	img         *Image
	inForce     []installed
	nextStateID uint32
	clock       Clock
	tickNs      uint64
	trackAfter  uint32
	sampleOneIn uint32 // overrides img.SampleOneIn when set
	cpus        int
	// wallOffset is the wall clock minus the datapath's clock, in ns:
	// fleet fixed windows start when the wall clock's windows do.
	wallOffset int64
	// bansExist: the ban table holds a ban, so the datapath must look.
	bansExist bool
}

// plan is what Apply writes: the new generation's rules and configuration,
// the counter slots and global-level slots that new rules and levels take
// (zeroed before the switch, with each new slot's rule name), and the next
// free state id.
type plan struct {
	rules       []gen.XdplimitXdplRule
	cfg         gen.XdplimitXdplGenCfg
	newSlots    []newSlot
	newGlobals  []uint32
	nextStateID uint32
}

type newSlot struct {
	slot uint32
	name string
}

// planGeneration decides the next generation without touching a map.
// Counter slots follow rule names: a kept name keeps its slot and counters,
// a new name takes a slot no rule in force uses. A level keeps its state id
// when its rule's name, its place in the policy and its limit are
// unchanged, and takes a new one otherwise. Global levels keep their state
// in xdpl_globals: a kept level keeps its slot, a new one takes a slot no
// level in force uses.
func planGeneration(in planInput) (plan, error) {
	p := plan{nextStateID: in.nextStateID}
	sl := slotsInForce(in.inForce)
	p.rules = make([]gen.XdplimitXdplRule, len(in.img.Rules))
	for i, rs := range in.img.Rules {
		r := &p.rules[i]
		o, had := sl.old[rs.Name]
		if had {
			r.CounterSlot = o.slot
		} else if err := p.newCounterSlot(sl, r, rs.Name); err != nil {
			return p, err
		}
		p.ruleFlags(r, rs)
		if err := p.planLevels(in, sl, r, rs, o.levels); err != nil {
			return p, err
		}
	}
	return p, p.planConfig(in)
}

// slots are the counter and global-level slots the rules in force hold,
// and where the search for a free one goes on from.
type slots struct {
	old             map[string]installed
	used, gused     []bool
	nextFree, gnext int
}

func slotsInForce(inForce []installed) *slots {
	sl := &slots{old: map[string]installed{}, used: make([]bool, CounterSlots), gused: make([]bool, globalSlots)}
	for _, r := range inForce {
		sl.old[r.name] = r
	}
	for _, o := range sl.old {
		sl.used[o.slot] = true
		for _, ol := range o.levels {
			if ol.KeyKind == KeyGlobal && int(ol.Slot) < globalSlots {
				sl.gused[ol.Slot] = true
			}
		}
	}
	return sl
}

// newCounterSlot gives a rule new to the generation a counter slot no
// rule in force uses.
func (p *plan) newCounterSlot(sl *slots, r *gen.XdplimitXdplRule, name string) error {
	for sl.nextFree < CounterSlots && sl.used[sl.nextFree] {
		sl.nextFree++
	}
	if sl.nextFree == CounterSlots {
		return fmt.Errorf("no free counter slot for rule %q", name)
	}
	sl.used[sl.nextFree] = true
	r.CounterSlot = uint32(sl.nextFree)
	if len(name) >= NameLen {
		return fmt.Errorf("rule name %q longer than %d bytes", name, NameLen-1)
	}
	p.newSlots = append(p.newSlots, newSlot{r.CounterSlot, name})
	return nil
}

// ruleFlags sets the rule's flags from its actions, and the flags of the
// generation they need.
func (p *plan) ruleFlags(r *gen.XdplimitXdplRule, rs RuleSpec) {
	if rs.Shadow {
		r.Flags |= rfShadow
	}
	if rs.SynCookie {
		r.Flags |= rfSynCookie
		p.cfg.Flags |= gfSynCookie
	}
	if rs.Reject {
		r.Flags |= rfReject
	}
	if b := rs.Ban; b != nil {
		r.Flags |= rfBan
		r.BanBits4, r.BanBits6 = uint8(b.V4Bits), uint8(b.V6Bits)
		r.BanNs = uint64(b.For)
		p.cfg.Flags |= gfBans
	}
}

// planLevels writes the rule's levels: a level keeps the state id (and a
// global one its slot) of the level in force it matches, else takes new ones.
func (p *plan) planLevels(in planInput, sl *slots, r *gen.XdplimitXdplRule, rs RuleSpec, inForce []gen.XdplimitXdplLevel) error {
	r.Nlevels = uint8(len(rs.Levels))
	for k, ls := range rs.Levels {
		lv := &r.Levels[k]
		in.levelFields(lv, ls)
		if lv.Flags&lfFleet != 0 && lv.Algorithm != AlgTokenBucket {
			// A sync may lower its count: cached refusals of it
			// hold only under the ban epoch (bpf/refused.h).
			p.cfg.Flags |= gfFleetWin
		}
		for _, ol := range inForce {
			if ol.Origin == lv.Origin && sameLimit(ol, *lv) {
				lv.StateId = ol.StateId
				if lv.Flags&lfFleet != 0 && ol.Flags&lfFleet != 0 {
					lv.P3 = ol.P3 // kept windows keep their alignment
				}
			}
		}
		kept := lv.StateId != 0
		if !kept {
			lv.StateId = p.nextStateID
			p.nextStateID++
		}
		if ls.KeyKind != KeyGlobal {
			continue
		}
		fresh, err := globalSlot(lv, inForce, kept, sl.gused, &sl.gnext)
		if err != nil {
			return fmt.Errorf("rule %q: %w", rs.Name, err)
		}
		if fresh {
			p.newGlobals = append(p.newGlobals, lv.Slot)
		}
	}
	return nil
}

// planConfig writes the generation's configuration from the image and the
// rules planned.
func (p *plan) planConfig(in planInput) error {
	p.cfg.Dims, p.cfg.Nrules = in.img.Dims, uint32(len(p.rules))
	p.cfg.SigMask = sigMask(in.img.Dims, p.rules)
	for i, r := range p.rules {
		if r.Flags&rfSynCookie != 0 {
			SetBit(&p.cfg.CookieRules, i)
		}
	}
	if noSourceFlows(in.img.Dims, p.rules) {
		p.cfg.Flags |= gfNoSrcFlows
	}
	p.cfg.SampleMask = sampleMask(in.img.SampleOneIn, in.sampleOneIn)
	if n := in.img.TrafficOneIn; n != 0 {
		if n&(n-1) != 0 {
			return fmt.Errorf("traffic sampling one in %d: not a power of two", n)
		}
		p.cfg.Flags |= gfTraffic
		p.cfg.TrafficMask = n - 1
	}
	p.cfg.Synack = in.img.SynAck.cfg()
	if b := in.img.RejectBudget; b != nil {
		in.levelFields(&p.cfg.Reject, *b)
	} else if in.img.Rejects() {
		return fmt.Errorf("reject rules without a budget for their answers")
	}
	if in.bansExist {
		p.cfg.Flags |= gfBans
	}
	if in.img.Shadow {
		p.cfg.Flags |= gfShadow
	}
	p.cfg.Flags |= aclFlags(in.img) | in.img.Conversations.flags()
	p.cfg.ReflWindowNs = uint64(in.img.Conversations.ReflectionWindow)
	return nil
}

// levelFields sets what a level is, from its compiled form and the clock
// and sketch the program was loaded with; the state id and global slot are
// the planner's.
func (in planInput) levelFields(lv *gen.XdplimitXdplLevel, ls LevelSpec) {
	lv.Algorithm = ls.Params.Algorithm
	lv.KeyKind = ls.KeyKind
	lv.P1, lv.P2, lv.P3 = ls.Params.P1, ls.Params.P2, ls.Params.P3
	if ls.Bytes {
		lv.Flags |= lfBytes
	}
	if in.clock == ClockCoarse && ls.needsFineClock(in.tickNs) {
		lv.Flags |= lfFineClock
	}
	if ls.trackFirst(in.trackAfter, in.cpus) {
		lv.Flags |= lfTrackFirst
	}
	if ls.KeyKind != KeyGlobal {
		lv.Mask4 = prefixMask4(ls.V4Prefix)
		lv.Mask6 = prefixMask6(ls.V6Prefix)
	}
	lv.Origin = uint8(ls.Origin)
	if ls.Fleet {
		lv.Flags |= lfFleet
		if lv.Algorithm == AlgFixedWindow && lv.P1 > 0 {
			lv.P3 = uint64(((in.wallOffset % int64(lv.P1)) + int64(lv.P1)) % int64(lv.P1))
		}
	}
}

// globalSlot gives a global level its slot in xdpl_globals: the slot of
// the level in force whose state it keeps, else a free one (fresh: to be
// zeroed before the switch).
func globalSlot(lv *gen.XdplimitXdplLevel, inForce []gen.XdplimitXdplLevel, kept bool, used []bool, next *int) (fresh bool, err error) {
	if kept {
		for _, ol := range inForce {
			if ol.StateId == lv.StateId && ol.KeyKind == KeyGlobal {
				lv.Slot = ol.Slot
				return false, nil
			}
		}
	}
	for *next < len(used) && used[*next] {
		*next++
	}
	if *next == len(used) {
		return false, fmt.Errorf("no free slot for a global level (%d in use)", len(used))
	}
	used[*next] = true
	lv.Slot = uint32(*next)
	return true, nil
}

// sameLimit: the state of a level carries over when everything that gives
// its state meaning is unchanged.
func sameLimit(a, b gen.XdplimitXdplLevel) bool {
	return a.Algorithm == b.Algorithm && a.KeyKind == b.KeyKind && a.Mask4 == b.Mask4 &&
		a.Mask6 == b.Mask6 && a.P1 == b.P1 && a.P2 == b.P2 &&
		a.Flags&lfBytes == b.Flags&lfBytes
}

// DefaultSampleOneIn is how many drops the datapath samples one of when the
// policy asks for no higher rate: enough for top, cheap on the drop path.
const DefaultSampleOneIn = 64

// sampleMask is the generation's sample_mask: one in n drops, n the
// override, else the policy's rate, else the default (powers of two).
func sampleMask(policy, override uint32) uint32 {
	n := policy
	if override != 0 {
		n = override
	}
	if n == 0 {
		n = DefaultSampleOneIn
	}
	return n - 1
}
