// SPDX-License-Identifier: Apache-2.0

package fleet

// One sync, step by step: the keys taken from the datapath, the exchange
// with Redis (the ban table read while it waits), and its answers folded
// back in, or the local limits when Redis does not answer.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/policy"
)

// sync exchanges the limits' keys. With bans (a datapath with a ban table)
// it starts their merge as it sends the exchange; Sync finishes it.
func (e *Engine) sync(ctx context.Context, bans *banPrefetch) (SyncResult, error) {
	var res SyncResult
	takes, fws, err := e.takeDue(&res)
	if err != nil {
		return res, err
	}
	span := e.nextSpan()
	if !e.link.due(time.Now()) {
		// Redis is down and its retry is not due.
		res.Skipped = true
		return res, e.fallback(takes, fws)
	}
	var over int
	takes, fws, over = e.bound(takes, fws)
	res.Unsynced += over
	r := e.newRound(takes, fws, span)
	if err := e.send(ctx, r, bans); err != nil {
		return res, err
	}
	return e.settle(r, res)
}

// takeDue starts a new epoch, then takes the keys due to exchange: the
// token buckets' pending units and the fixed windows' counts.
func (e *Engine) takeDue(res *SyncResult) ([]take, []fwSync, error) {
	// A new epoch first: every key that admits from now on reports again.
	e.epoch = nextEpoch(e.epoch)
	if err := e.dp.SetFleetEpoch(e.epoch); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", errDatapath, err)
	}
	tb, err := e.sortReports(res)
	if err != nil {
		return nil, nil, err
	}
	takes, err := e.takeTB(tb)
	if err != nil {
		return nil, nil, err
	}
	// The units taken say which keys are still above their share here;
	// the others whose hold is over leave the exchange, with the units
	// they admitted since the take.
	for _, t := range takes {
		e.noteTaken(t)
	}
	cooled, err := e.heatCool()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", errDatapath, err)
	}
	takes = mergeTakes(takes, cooled)
	fws, err := e.readFW()
	if err != nil {
		return nil, nil, err
	}
	e.recentTB = map[maps.FleetKey]*level{}
	for _, t := range takes {
		if t.pending > 0 {
			e.recentTB[t.key] = t.lv
		}
	}
	return takes, fws, nil
}

// sortReports reads the keys reported since the last epoch. A fixed window
// is tracked; a token bucket is returned, with those still pending at the
// last sync (their units may have come after its take).
func (e *Engine) sortReports(res *SyncResult) (map[maps.FleetKey]*level, error) {
	tb := map[maps.FleetKey]*level{}
	for k, lv := range e.recentTB {
		tb[k] = lv
	}
	keys, dropped, err := e.takeReports()
	res.Reported, res.Unsynced = len(keys), dropped
	if err != nil {
		return nil, fmt.Errorf("%w: reading reported keys: %v", errDatapath, err)
	}
	for k := range keys {
		lv := e.levels[k.StateID]
		if lv == nil {
			continue // a level replaced by a reload
		}
		if lv.Algorithm == maps.AlgTokenBucket {
			tb[k] = lv
			e.noteHot(k, lv)
		} else {
			e.trackFW(k, lv)
		}
	}
	return tb, nil
}

// nextSpan notes this sync's take and returns the time since the last
// one's: the interval at the first, at most 4 intervals.
func (e *Engine) nextSpan() time.Duration {
	now := e.opts.Now()
	span := e.opts.Fleet.Sync
	if e.lastSync != 0 && now > e.lastSync {
		span = min(time.Duration(now-e.lastSync), 4*e.opts.Fleet.Sync)
	}
	e.lastSync, e.span = now, span
	return span
}

// syncRound is one exchange: the keys taken, their requests to Redis and
// the heartbeat, which the exchange fills with Redis' answers.
type syncRound struct {
	takes []take
	fws   []fwSync
	tbx   []tbExchange
	fwx   []fwExchange
	hb    *heartbeat
	ann   *announce
}

// newRound writes the requests for the keys taken over span.
func (e *Engine) newRound(takes []take, fws []fwSync, span time.Duration) *syncRound {
	nowUs := "" // the server's clock
	if e.opts.RedisUs != nil {
		nowUs = fmtUs(e.opts.RedisUs())
	}
	tbx := make([]tbExchange, len(takes))
	for i, t := range takes {
		tbx[i] = tbExchange{key: t.lv.redisKey(e.opts.Fleet.Namespace, t.key),
			addUs: float64(t.pending) * t.lv.intervalUs, ttlMs: t.lv.ttlMs,
			spanUs: float64(span) / 1e3, nowUs: nowUs,
			maxDebtUs: t.lv.tolUs + float64(e.debtHorizon())/1e3}
	}
	fwx := make([]fwExchange, len(fws))
	for i, f := range fws {
		fwx[i] = fwExchange{key: f.redisKey(e.opts.Fleet.Namespace), add: f.unsent, ttlMs: f.k.lv.ttlMs,
			share: shareOf(f.k.lv.P2, e.hosts)}
	}
	hb := &heartbeat{key: "xdpl:" + e.opts.Fleet.Namespace + ":hosts", member: e.opts.HostID,
		nowMs: e.opts.Wall() / 1e6, ttlMs: max(3*e.opts.Fleet.Sync, 2*time.Second).Milliseconds()}
	var ann *announce
	if e.shareOn() {
		ann = &announce{key: "xdpl:" + e.opts.Fleet.Namespace + ":hot", members: e.announcements(),
			cursor: e.hotCursor, holdMs: int64(e.hold() / 1e6)}
	}
	return &syncRound{takes: takes, fws: fws, tbx: tbx, fwx: fwx, hb: hb, ann: ann}
}

// debtHorizon is the policy's, or the default for a fleet: section made
// without the parser.
func (e *Engine) debtHorizon() time.Duration {
	if h := e.opts.Fleet.DebtHorizon; h > 0 {
		return h
	}
	return policy.DefaultDebtHorizon
}

// send exchanges r with Redis, the ban table's read started first so that
// it runs while the exchange waits. When the exchange fails, the keys fall
// back to their local limits.
func (e *Engine) send(ctx context.Context, r *syncRound, bans *banPrefetch) error {
	bans.start(e)
	xctx, cancel := context.WithTimeout(ctx, syncDeadline(e.opts.Fleet.Sync, len(r.tbx)+len(r.fwx)))
	err := exchange(xctx, e.client, r.hb, r.tbx, r.fwx, r.ann, bans.scanOf())
	cancel()
	if err == nil {
		return nil
	}
	// A canceled ctx is the engine stopping (exit, or a reload that
	// restarts it) mid-exchange: no news of Redis, nothing to log.
	if ctx.Err() == nil {
		e.link.failed(err, e.opts.Logf, e.opts.Fleet.Fallback, e.m)
	}
	if ferr := e.fallback(r.takes, r.fws); ferr != nil {
		return errors.Join(err, ferr)
	}
	return err
}

// settle takes in the answers of an exchange that went through: the live
// hosts, the reserves back, the other hosts' admissions folded in.
func (e *Engine) settle(r *syncRound, res SyncResult) (SyncResult, error) {
	e.link.ok(e.opts.Logf, e.m)
	e.hosts, e.known = int(r.hb.live), true
	e.m.hosts.Set(float64(e.hosts))
	if err := e.setReserves(true); err != nil {
		return res, err
	}
	if err := e.setShares(true); err != nil {
		return res, fmt.Errorf("%w: %v", errDatapath, err)
	}
	if a := r.ann; a != nil && a.err == nil {
		e.hotCursor = a.last
		// Marked now rather than at the next sync: until then the key's
		// units here are not counted by the fleet.
		if e.heard(e.heardKeys(a.read)) {
			if _, err := e.heatCool(); err != nil {
				return res, fmt.Errorf("%w: %v", errDatapath, err)
			}
		}
	}
	e.countLevels(r)
	res.Exchanged = len(r.tbx) + len(r.fwx)
	folded, err := e.fold(r.takes, r.tbx, r.fws, r.fwx)
	res.Folded = folded
	e.expireFW()
	if n, kerr := keyErrors(r.tbx, r.fwx); kerr != nil && err == nil {
		// Redis answers, but not for these keys (a key of another type
		// under our namespace, a script error): counted, the rest synced.
		res.Exchanged -= n
		err = fmt.Errorf("%d keys not synced: %w", n, kerr)
	}
	return res, err
}
