// SPDX-License-Identifier: Apache-2.0

package fleet

import (
	"maps"
	"math"
	"time"

	xmaps "github.com/xdplimit/xdplimit/maps"
)

// Local shares (bpf/fleet.h): each host admits a token bucket's key up to
// its share of the limit without a word to the fleet. A key that uses
// report_at of its share's burst crosses into the exchange and reports; the
// engine then announces it on the fleet's stream, and every host puts it in
// its own exchange, so that the hosts that saw it below their share count
// what they admit too. A key leaves the exchange share_hold after the last
// host that saw it above its share said so.

// hotKey is a key in the exchange on this host.
type hotKey struct {
	lv *level
	// until: the datapath clock at which the key leaves the exchange,
	// unless a host sees it above its share again.
	until uint64
	// shareTat mirrors the datapath's share bucket with the units taken:
	// running ahead of now by more than the report threshold, the key is
	// still above its share here.
	shareTat uint64
	// active: when this host last saw the key cross or run above its
	// share; announced: when it last said so on the stream (0: never).
	active, announced uint64
	heated            bool // its state entry is marked (a heat or its own report)
}

// shareOn: the policy keeps keys within their shares out of the exchange.
func (e *Engine) shareOn() bool { return !e.opts.Fleet.Share.Off }

// hold is how long a key stays in the exchange after the fleet last saw it
// above its share: the policy's, at least three syncs.
func (e *Engine) hold() uint64 {
	return uint64(max(e.opts.Fleet.Share.Hold, 3*e.opts.Fleet.Sync, time.Second))
}

// shareFraction is one host's share of a limit.
func (e *Engine) shareFraction() float64 {
	if f := e.opts.Fleet.Share.Fraction; f > 0 {
		return f
	}
	return 1 / float64(max(e.hosts, 1))
}

// shareFor is the datapath's test of a token-bucket level's share.
func (e *Engine) shareFor(lv *level) xmaps.FleetShare {
	s, f := e.shareFraction(), e.opts.Fleet.Share.ReportAt
	inc := float64(lv.P1) / s
	// The datapath multiplies inc by a packet's cost: kept well inside
	// 64 bits even for a byte limit's largest frames.
	inc = min(inc, float64(uint64(1)<<47))
	burst := float64(lv.P2) / float64(max(lv.intervalTU, 1))
	return xmaps.FleetShare{Inc: uint64(inc), Tol: uint64(f * float64(lv.P2>>xmaps.TimeShift)),
		Cross: uint64(math.Round(f * s * burst))}
}

// setShares writes the token-bucket levels' shares for the live hosts
// known, when they changed; with share: off, none: every key is exchanged.
// Until the first exchange (hosts unknown) the datapath keeps the shares it
// has, a previous engine's: clearing them would put every key that admits
// in the exchange at once, the cost shares avoid, at every restart. A
// level without one exchanges every key until then.
func (e *Engine) setShares(known bool) error {
	if !known && e.shareOn() {
		return nil
	}
	want := map[uint32]xmaps.FleetShare{}
	if e.shareOn() {
		for id, lv := range e.levels {
			if lv.Algorithm == xmaps.AlgTokenBucket {
				want[id] = e.shareFor(lv)
			}
		}
	}
	if e.shares != nil && maps.Equal(want, e.shares) {
		return nil
	}
	if err := e.dp.SetFleetShares(want); err != nil {
		return err
	}
	e.shares = want
	return nil
}

// noteHot puts a reported key in the exchange. A key not marked by this
// engine crossed its share here (or was marked before an engine restart):
// it is announced at this sync.
func (e *Engine) noteHot(k xmaps.FleetKey, lv *level) {
	if !e.shareOn() || lv.Algorithm != xmaps.AlgTokenBucket {
		return
	}
	h := e.hot[k]
	if h != nil && h.heated {
		return
	}
	if h == nil {
		h = &hotKey{lv: lv}
		e.hot[k] = h
	}
	if !e.known {
		// No shares yet: every key reports. It leaves the exchange at
		// the first sync that knows the fleet, and crosses again if it
		// is above its share.
		h.heated = true
		return
	}
	now := e.opts.Now()
	h.heated, h.active, h.until = true, now, max(h.until, now+e.hold())
	e.m.levelCrossed.WithLabelValues(lv.label()).Inc()
}

// noteTaken runs the units this host admitted through the key's share
// bucket: while it runs over the report threshold the key stays in the
// exchange, and is announced again every half hold.
func (e *Engine) noteTaken(t take) {
	h := e.hot[t.key]
	if h == nil || t.pending == 0 {
		return
	}
	// Before the fleet's size is known, as if this host were alone: a key
	// above the whole limit here stays in the exchange.
	sh := e.shareFor(h.lv)
	now := e.opts.Now()
	inc := uint64((float64(t.pending) * float64(sh.Inc)) / float64(uint64(1)<<xmaps.FPShift))
	h.shareTat = max(h.shareTat, now) + inc
	if h.shareTat-now > sh.Tol {
		h.active, h.until = now, max(h.until, now+e.hold())
	}
}

// announcements is the members this host announces at this sync.
func (e *Engine) announcements() []string {
	now := e.opts.Now()
	var out []string
	for k, h := range e.hot {
		if !h.heated || h.until <= now {
			continue
		}
		// Announced when the key crossed here, and again every half hold
		// while this host sees it above its share; heard keys are not
		// echoed.
		if h.active > h.announced && (h.announced == 0 || now-h.announced >= e.hold()/2) {
			h.announced = now
			out = append(out, h.lv.name+"|"+keyString(k, h.lv.Global))
		}
	}
	return out
}

// heard puts the keys other hosts announced in the exchange here; true
// when one is not marked here yet.
func (e *Engine) heard(keys []xmaps.FleetKey) bool {
	now := e.opts.Now()
	unmarked := false
	for _, k := range keys {
		lv := e.levels[k.StateID]
		if lv == nil || lv.Algorithm != xmaps.AlgTokenBucket {
			continue
		}
		h := e.hot[k]
		if h == nil {
			// The stream is anyone's to write: what it can make this
			// host follow is bounded.
			if len(e.hot) >= e.opts.MaxKeys {
				continue
			}
			h = &hotKey{lv: lv}
			e.hot[k] = h
		}
		h.until = max(h.until, now+e.hold())
		unmarked = unmarked || !h.heated
	}
	return unmarked
}

// heatCool marks the keys heard of but not yet marked, and takes out of
// the exchange the keys whose hold is over; the units these had pending
// are returned for this sync's exchange.
func (e *Engine) heatCool() ([]take, error) {
	if len(e.hot) == 0 || !e.known {
		return nil, nil
	}
	now := e.opts.Now()
	var ops []xmaps.FleetOp
	for k, h := range e.hot {
		switch {
		case h.until <= now:
			ops = append(ops, fleetOp(k, h.lv, xmaps.FleetCool))
		case !h.heated:
			ops = append(ops, fleetOp(k, h.lv, xmaps.FleetHeat))
		}
	}
	if len(ops) == 0 {
		return nil, nil
	}
	if err := e.dp.FleetRun(ops); err != nil {
		return nil, err
	}
	var cooled []take
	for _, op := range ops {
		h := e.hot[op.Key]
		if op.Kind == xmaps.FleetHeat {
			// A key missing here is marked at a later sync, once it
			// admits something: until then its share bounds it.
			h.heated = op.Done && !op.Missing
			continue
		}
		delete(e.hot, op.Key)
		delete(e.recentTB, op.Key)
		if op.Done && op.Out0 > 0 {
			cooled = append(cooled, take{key: op.Key, lv: h.lv, pending: op.Out0, tat: op.Out1})
		}
	}
	return cooled, nil
}

// hotGauges sets the keys in the exchange per level.
func (e *Engine) hotGauges() {
	n := map[string]int{}
	for _, lv := range e.levels {
		if lv.Algorithm == xmaps.AlgTokenBucket {
			n[lv.label()] += 0
		}
	}
	for _, h := range e.hot {
		n[h.lv.label()]++
	}
	e.m.levelHot.Reset()
	for l, c := range n {
		e.m.levelHot.WithLabelValues(l).Set(float64(c))
	}
}

// countLevels counts the keys an exchange carried, per level, and the keys
// in the exchange.
func (e *Engine) countLevels(r *syncRound) {
	n := map[string]int{}
	for i, t := range r.takes {
		if r.tbx[i].err == nil {
			n[t.lv.label()]++
		}
	}
	for i, f := range r.fws {
		if r.fwx[i].err == nil {
			n[f.k.lv.label()]++
		}
	}
	for l, c := range n {
		e.m.levelExchanged.WithLabelValues(l).Add(float64(c))
	}
	e.hotGauges()
}

// mergeTakes adds the units of keys that left the exchange to the takes:
// one exchange per key.
func mergeTakes(takes, cooled []take) []take {
	if len(cooled) == 0 {
		return takes
	}
	at := make(map[xmaps.FleetKey]int, len(takes))
	for i, t := range takes {
		at[t.key] = i
	}
	for _, c := range cooled {
		if i, ok := at[c.key]; ok {
			takes[i].pending += c.pending
			continue
		}
		takes = append(takes, c)
	}
	return takes
}

// withinEvery is how often Run counts the keys within their share: a walk
// of the state tables, so not at every sync.
const withinEvery = 10 * time.Second

// ShareCounter is a datapath that can count its keys within their share
// (maps.Limiter).
type ShareCounter interface {
	FleetWithinShare(ids map[uint32]bool) (map[uint32]int, error)
}

// CountWithin sets each token-bucket level's count of keys within their
// share, from a walk of the datapath's state tables.
func (e *Engine) CountWithin() error {
	sc, ok := e.dp.(ShareCounter)
	if !ok {
		return nil
	}
	e.mu.Lock()
	ids, labels := map[uint32]bool{}, map[uint32]string{}
	for id := range e.shares {
		if lv := e.levels[id]; lv != nil {
			ids[id], labels[id] = true, lv.label()
		}
	}
	e.mu.Unlock()
	n := map[uint32]int{}
	if len(ids) > 0 {
		var err error
		if n, err = sc.FleetWithinShare(ids); err != nil {
			return err
		}
	}
	e.m.levelWithin.Reset()
	for id, l := range labels {
		e.m.levelWithin.WithLabelValues(l).Set(float64(n[id]))
	}
	return nil
}
