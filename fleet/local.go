// SPDX-License-Identifier: Apache-2.0

package fleet

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/xdplimit/xdplimit/maps"
)

// The local half of a sync: taking what the datapath admitted, and folding
// in what the other hosts admitted, each as one batch run of the datapath's
// apply program, which is atomic against the packet path.

// take is one token-bucket key of a sync.
type take struct {
	key     maps.FleetKey
	lv      *level
	pending uint64 // units this host admitted since the last take
	tat     uint64 // the bucket's tat at the take
}

func fleetOp(k maps.FleetKey, lv *level, kind maps.FleetOpKind) maps.FleetOp {
	op := maps.FleetOp{Key: k, Kind: kind}
	if lv.Global {
		op.Global, op.Slot = true, lv.Slot
	}
	return op
}

// takeTB takes the pending units of the token-bucket keys.
func (e *Engine) takeTB(keys map[maps.FleetKey]*level) ([]take, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	ops := make([]maps.FleetOp, 0, len(keys))
	lvs := make([]*level, 0, len(keys))
	for k, lv := range keys {
		ops = append(ops, fleetOp(k, lv, maps.FleetTake))
		lvs = append(lvs, lv)
	}
	if err := e.dp.FleetRun(ops); err != nil {
		return nil, fmt.Errorf("%w: %v", errDatapath, err)
	}
	out := make([]take, 0, len(ops))
	for i, op := range ops {
		if op.Missing || !op.Done {
			continue // evicted, or contended past the retries: next sync
		}
		out = append(out, take{key: op.Key, lv: lvs[i], pending: op.Out0, tat: op.Out1})
	}
	return out, nil
}

// fwKey follows one fixed-window key through its current window.
type fwKey struct {
	lv      *level
	seq     uint64 // the window's sequence bits in the state word
	idx     uint64 // the local window index (datapath clock + phase)
	sent    uint64 // units of this host's in the window sent to Redis
	applied uint64 // units of other hosts' added to the local count
}

// fwSync is one fixed-window key of a sync.
type fwSync struct {
	key    maps.FleetKey
	k      *fwKey
	widx   int64 // the fleet's window number (wall clock)
	unsent uint64
}

func (f *fwSync) redisKey(ns string) string {
	return f.k.lv.redisKey(ns, f.key) + ":w" + strconv.FormatInt(f.widx, 10)
}

// windowNow is the local index of the window in force at now.
func windowNow(lv *level, now uint64) uint64 { return (now + lv.P3) / lv.P1 }

// trackFW starts following a key that opened a window.
func (e *Engine) trackFW(k maps.FleetKey, lv *level) {
	idx := windowNow(lv, e.opts.Now())
	if f, ok := e.fw[k]; ok && f.idx == idx && f.lv == lv {
		return
	}
	e.fw[k] = &fwKey{lv: lv, idx: idx, seq: idx & maps.WinSeqMask, applied: e.reserves[k.StateID]}
}

// readFW reads the counts of the followed fixed-window keys and works out
// what this host admitted that Redis has not seen.
func (e *Engine) readFW() ([]fwSync, error) {
	if len(e.fw) == 0 {
		return nil, nil
	}
	ops := make([]maps.FleetOp, 0, len(e.fw))
	for k, f := range e.fw {
		ops = append(ops, fleetOp(k, f.lv, maps.FleetRead))
	}
	if err := e.dp.FleetRun(ops); err != nil {
		return nil, fmt.Errorf("%w: %v", errDatapath, err)
	}
	now, wall := e.opts.Now(), e.opts.Wall()
	out := make([]fwSync, 0, len(ops))
	for _, op := range ops {
		f := e.fw[op.Key]
		if op.Missing || !op.Done {
			delete(e.fw, op.Key)
			continue
		}
		seq, cnt := op.Out0>>maps.WinCountBits, op.Out0&maps.WinCountMask
		if seq != f.seq {
			// The key is in another window than the one followed (it
			// opened a newer one; its report is on the way).
			cur := windowNow(f.lv, now)
			if seq != cur&maps.WinSeqMask {
				continue
			}
			*f = fwKey{lv: f.lv, idx: cur, seq: seq, applied: e.reserves[op.Key.StateID]}
		}
		own := uint64(0)
		if cnt > f.applied+f.sent {
			own = cnt - f.applied - f.sent
		}
		out = append(out, fwSync{key: op.Key, k: f, unsent: own, widx: fleetWindow(f.lv, f.idx, now, wall)})
	}
	return out, nil
}

// fleetWindow numbers a local window by the wall clock. The phase P3 made
// local windows start when the wall clock's do (P3 = wall - datapath clock,
// modulo the window, when the policy was applied), so the two numberings
// differ by a whole number of windows: the rounded clock offset.
func fleetWindow(lv *level, idx, now uint64, wall int64) int64 {
	off := wall - int64(now) - int64(lv.P3)
	return int64(idx) + int64(math.Round(float64(off)/float64(lv.P1)))
}

// expireFW stops following keys whose window is over (their last units
// were sent in this sync).
func (e *Engine) expireFW() {
	now := e.opts.Now()
	for k, f := range e.fw {
		if windowNow(f.lv, now) > f.idx {
			delete(e.fw, k)
		}
	}
}

// bound keeps a sync within MaxKeys keys, heaviest first.
func (e *Engine) bound(tb []take, fw []fwSync) ([]take, []fwSync, int) {
	limit := e.opts.MaxKeys
	if len(tb)+len(fw) <= limit {
		return tb, fw, 0
	}
	slices.SortFunc(tb, func(a, b take) int { return cmpDesc(a.pending, b.pending) })
	slices.SortFunc(fw, func(a, b fwSync) int { return cmpDesc(a.unsent, b.unsent) })
	dropped := len(tb) + len(fw) - limit
	ntb := min(len(tb), limit-min(len(fw), limit/2))
	nfw := min(len(fw), limit-ntb)
	for _, t := range tb[ntb:] {
		e.m.levelUnsynced.WithLabelValues(t.lv.label()).Inc()
	}
	for _, f := range fw[nfw:] {
		e.m.levelUnsynced.WithLabelValues(f.k.lv.label()).Inc()
	}
	return tb[:ntb], fw[:nfw], dropped
}

func cmpDesc(a, b uint64) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

// fold moves each key's local state by what the other hosts admitted.
func (e *Engine) fold(takes []take, tbx []tbExchange, fws []fwSync, fwx []fwExchange) (int, error) {
	now := e.opts.Now()
	var ops []maps.FleetOp
	var lvs []*level
	for i, t := range takes {
		if tbx[i].err == nil && tbx[i].clamped {
			e.m.clamped.Inc()
		}
		if tbx[i].err != nil || tbx[i].debtUs <= 0 {
			continue // failed, or the fleet's bucket is not ahead of now
		}
		op := fleetOp(t.key, t.lv, maps.FleetFoldTAT)
		op.Arg0 = (now + uint64(tbx[i].debtUs*1e3)) << maps.TimeShift
		op.Arg1 = t.lv.intervalTU
		ops = append(ops, op)
		lvs = append(lvs, t.lv)
	}
	nTB := len(ops)
	for i, f := range fws {
		if fwx[i].err != nil {
			continue // not counted by Redis: sent again next sync
		}
		f.k.sent += f.unsent
		// What this host should count for the others: what they reported.
		// While the window is young, each other live host is held at
		// least at its share, reported or not: a host that reported part
		// of its share may still be admitting the rest (it reported in the
		// middle of a burst), and counting only what it reported would
		// hand the rest to this host too (measured end to end: 1.5x the
		// limit per window with three hosts at 10x). The delta to what it
		// counts for them now may be negative: a released reserve.
		others := int64(fwx[i].total) - int64(f.k.sent)
		if e.young(f.k, now) {
			unreported := max(e.hosts-fwx[i].reporters, 0)
			others = max(others, int64(fwx[i].held)+int64(unreported)*int64(fwx[i].share))
		}
		remote := others - int64(f.k.applied)
		if remote == 0 {
			continue
		}
		op := fleetOp(f.key, f.k.lv, maps.FleetAdd)
		op.Arg0, op.Arg1 = f.k.seq, uint64(remote)
		ops = append(ops, op)
		lvs = append(lvs, f.k.lv)
	}
	if len(ops) == 0 {
		return 0, nil
	}
	if err := e.dp.FleetRun(ops); err != nil {
		return 0, fmt.Errorf("%w: %v", errDatapath, err)
	}
	folded := 0
	var units float64
	for i, op := range ops {
		if !op.Done || op.Missing || op.Stale {
			continue
		}
		if i < nTB {
			if op.Out0 > 0 && lvs[i].intervalTU > 0 {
				folded++
				units += float64(op.Out0) / float64(lvs[i].intervalTU)
			}
			continue
		}
		f := e.fw[op.Key]
		if f != nil {
			f.applied = uint64(int64(f.applied) + int64(op.Arg1))
		}
		folded++
		if d := int64(op.Arg1); d > 0 {
			units += float64(d) // a released reserve is not consumption
		}
	}
	e.m.remote.Add(units)
	return folded, nil
}

// young: the window opened less than two syncs ago here, so a host that
// admitted at its start may not have synced yet. Two syncs as they happen
// (the span between this host's last two, from the interval up to four),
// not two intervals: on a loaded machine syncs drift apart, and a young
// part of two intervals ended before the hosts had reported their
// shares, which the others then took as well (TestFleetFixedWindowStretchedSyncs).
func (e *Engine) young(f *fwKey, now uint64) bool {
	start := f.idx*f.lv.P1 - f.lv.P3
	return now < start+uint64(2*max(e.span, e.opts.Fleet.Sync))
}
