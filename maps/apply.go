package maps

import (
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/gen"
)

// installed is a rule of the generation in force, for carrying state ids
// and counter slots over a reload.
type installed struct {
	slot   uint32
	levels []gen.XdplimitXdplLevel
}

// Apply writes img as the inactive generation and then makes it the active
// one with a single write, so that traffic sees the old policy or the new
// one and never a mix. Until that write nothing in force has changed: an
// error leaves the running policy as it was. Rules whose name and limit are
// unchanged keep their state; a changed limit starts fresh.
func (l *Limiter) Apply(img *Image) error {
	g, ctl, err := l.active()
	if err != nil {
		return err
	}
	next := g ^ 1
	meta, err := l.Meta()
	if err != nil {
		return err
	}

	old := map[string]installed{}
	for i := 0; i < int(ctl.Gen[g].Nrules) && i < MaxRules; i++ {
		r, err := l.rule(g, i)
		if err != nil {
			return err
		}
		name, err := l.name(r.CounterSlot)
		if err != nil {
			return err
		}
		old[name] = installed{slot: r.CounterSlot, levels: r.Levels[:r.Nlevels]}
	}

	// Counter slots follow rule names; new names take slots no rule in
	// force uses, zeroed.
	used := make([]bool, CounterSlots)
	for _, o := range old {
		used[o.slot] = true
	}
	// Global levels keep their state in xdpl_globals: a kept level keeps
	// its slot, a new one takes a slot no level in force uses, zeroed
	// before the switch.
	gused := make([]bool, globalSlots)
	for _, o := range old {
		for _, ol := range o.levels {
			if ol.KeyKind == KeyGlobal && int(ol.Slot) < globalSlots {
				gused[ol.Slot] = true
			}
		}
	}
	gnext := 0
	rules := make([]gen.XdplimitXdplRule, len(img.Rules))
	nextFree := 0
	for i, rs := range img.Rules {
		r := &rules[i]
		o, had := old[rs.Name]
		if had {
			r.CounterSlot = o.slot
		} else {
			for nextFree < CounterSlots && used[nextFree] {
				nextFree++
			}
			if nextFree == CounterSlots {
				return fmt.Errorf("no free counter slot for rule %q", rs.Name)
			}
			used[nextFree] = true
			r.CounterSlot = uint32(nextFree)
			if err := l.resetSlot(r.CounterSlot, rs.Name); err != nil {
				return err
			}
		}
		if rs.Shadow {
			r.Flags |= rfShadow
		}
		r.Nlevels = uint8(len(rs.Levels))
		for k, ls := range rs.Levels {
			lv := &r.Levels[k]
			lv.Algorithm = ls.Params.Algorithm
			lv.KeyKind = ls.KeyKind
			lv.P1, lv.P2 = ls.Params.P1, ls.Params.P2
			if ls.Bytes {
				lv.Flags |= lfBytes
			}
			if l.clock == ClockCoarse && ls.needsFineClock(l.tickNs) {
				lv.Flags |= lfFineClock
			}
			if ls.trackFirst(l.trackAfter, ebpf.MustPossibleCPU()) {
				lv.Flags |= lfTrackFirst
			}
			if ls.KeyKind != KeyGlobal {
				lv.Mask4 = prefixMask4(ls.V4Prefix)
				lv.Mask6 = prefixMask6(ls.V6Prefix)
			}
			lv.Origin = uint8(ls.Origin)
			lv.StateId = 0
			for _, ol := range o.levels {
				if had && ol.Origin == lv.Origin && sameLimit(ol, *lv) {
					lv.StateId = ol.StateId
				}
			}
			kept := lv.StateId != 0
			if !kept {
				lv.StateId = meta.NextStateId
				meta.NextStateId++
			}
			if ls.KeyKind == KeyGlobal {
				if err := l.globalSlot(lv, o.levels, kept, gused, &gnext); err != nil {
					return fmt.Errorf("rule %q: %w", rs.Name, err)
				}
			}
		}
	}

	if err := l.writeGeneration(next, img, rules); err != nil {
		return fmt.Errorf("writing the new policy (the old one stays in force): %w", err)
	}
	cfg := gen.XdplimitXdplGenCfg{Dims: img.Dims, Nrules: uint32(len(rules))}
	if img.Shadow {
		cfg.Flags |= gfShadow
	}
	if len(img.Allow)+len(img.Deny) > 0 {
		cfg.Flags |= gfACL
	}
	ctl.Gen[next] = cfg
	if err := l.objs.XdplCtl.Update(uint32(0), &ctl, ebpf.UpdateAny); err != nil {
		return err
	}
	if err := l.SetMeta(meta); err != nil {
		return err
	}
	// The switch: only the active word differs from what is in the map.
	ctl.Active = next
	return l.objs.XdplCtl.Update(uint32(0), &ctl, ebpf.UpdateAny)
}

// globalSlot gives a global level its slot in xdpl_globals: the slot of
// the level in force whose state it keeps, else a free one, zeroed.
func (l *Limiter) globalSlot(lv *gen.XdplimitXdplLevel, inForce []gen.XdplimitXdplLevel, kept bool, used []bool, next *int) error {
	if kept {
		for _, ol := range inForce {
			if ol.StateId == lv.StateId && ol.KeyKind == KeyGlobal {
				lv.Slot = ol.Slot
				return nil
			}
		}
	}
	for *next < len(used) && used[*next] {
		*next++
	}
	if *next == len(used) {
		return fmt.Errorf("no free slot for a global level (%d in use)", len(used))
	}
	used[*next] = true
	lv.Slot = uint32(*next)
	return l.objs.XdplGlobals.Update(lv.Slot, &gen.XdplimitXdplState{}, ebpf.UpdateAny)
}

// sameLimit: the state of a level carries over when everything that gives
// its state meaning is unchanged.
func sameLimit(a, b gen.XdplimitXdplLevel) bool {
	return a.Algorithm == b.Algorithm && a.KeyKind == b.KeyKind && a.Mask4 == b.Mask4 &&
		a.Mask6 == b.Mask6 && a.P1 == b.P1 && a.P2 == b.P2 &&
		a.Flags&lfBytes == b.Flags&lfBytes
}
