// SPDX-License-Identifier: Apache-2.0

package maps

import (
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/gen"
)

// Apply writes img as the inactive generation and then makes it the active
// one with a single write, so that traffic sees the old policy or the new
// one and never a mix. Until that write nothing in force has changed: an
// error leaves the running policy as it was. Rules whose name and limit are
// unchanged keep their state; a changed limit starts fresh. What to write
// is planGeneration's; Apply reads what it needs and writes the plan.
func (l *Limiter) Apply(img *Image) error {
	if err := l.checkImage(img); err != nil {
		return err
	}
	l.ctlMu.Lock()
	defer l.ctlMu.Unlock()
	g, ctl, err := l.active()
	if err != nil {
		return err
	}
	next := g ^ 1
	meta, err := l.Meta()
	if err != nil {
		return err
	}
	inForce, err := l.inForce(g, ctl)
	if err != nil {
		return err
	}
	bans, err := l.anyBan()
	if err != nil {
		return err
	}
	p, err := planGeneration(planInput{
		bansExist: bans,
		img:       img, inForce: inForce, nextStateID: meta.NextStateID,
		clock: l.clock, tickNs: l.tickNs, trackAfter: l.trackAfter, sampleOneIn: l.sampleOneIn, cpus: ebpf.MustPossibleCPU(),
		wallOffset: wallOffset(),
	})
	if err != nil {
		return err
	}
	// New counter and global slots are ones no rule in force uses:
	// zeroing them changes nothing traffic sees.
	for _, s := range p.newSlots {
		if err := l.resetSlot(s.slot, s.name); err != nil {
			return err
		}
	}
	for _, s := range p.newGlobals {
		if err := l.objs.XdplGlobals.Update(s, &gen.XdplimitXdplState{}, ebpf.UpdateAny); err != nil {
			return err
		}
	}

	// A budget of answers that changed starts full: its state is read
	// against the new rate from the switch on.
	if !sameLimit(ctl.Gen[g].Reject, p.cfg.Reject) {
		if err := l.objs.XdplRejectBudget.Update(uint32(0), &gen.XdplimitXdplState{}, ebpf.UpdateAny); err != nil {
			return err
		}
	}
	if err := l.writeNext(g, next, img, &p); err != nil {
		return fmt.Errorf("writing the new policy (the old one stays in force): %w", err)
	}
	ctl.Gen[next] = p.cfg
	ctl.Gen[next].Index = next
	ctl.Gen[next].Seq = nextSeq(&ctl)
	if err := l.objs.XdplCtl.Update(uint32(0), &ctl, ebpf.UpdateAny); err != nil {
		return err
	}
	meta.NextStateID = p.nextStateID
	if img.BanLimits.Set {
		meta.BanLimits = img.BanLimits
	}
	if err := l.SetMeta(meta); err != nil {
		return err
	}
	// The switch: only the active word differs from what is in the map.
	ctl.Active = next
	return l.objs.XdplCtl.Update(uint32(0), &ctl, ebpf.UpdateAny)
}

// checkImage refuses what this limiter cannot put in force, before
// anything is written.
func (l *Limiter) checkImage(img *Image) error {
	if err := img.SynAck.Check(); err != nil {
		return err
	}
	if err := l.checkLogs(img); err != nil {
		return err
	}
	if err := img.Conversations.check(); err != nil {
		return err
	}
	return l.checkConntrack(img.Conversations)
}

// writeNext writes what the inactive generation next reads, and the
// host's local addresses the image carries.
func (l *Limiter) writeNext(g, next uint32, img *Image, p *plan) error {
	if err := l.writeGeneration(next, img, p.rules); err != nil {
		return err
	}
	if err := l.writeUnparsed(g, next, img.Unparsed); err != nil {
		return fmt.Errorf("unparsed: %w", err)
	}
	if err := l.writeReflectors(next, img.Conversations.ReflectorPorts); err != nil {
		return err
	}
	if img.Local != nil {
		return l.SetLocal(img.Local)
	}
	return nil
}
