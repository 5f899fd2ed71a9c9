// SPDX-License-Identifier: Apache-2.0

package fleet

import (
	"fmt"
	"maps"

	xmaps "github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/policy"
)

// What fleet levels do around the exchange: the reserve fixed windows open
// with, and the fallback while Redis cannot be reached.

// reserveFor is what a fixed window holds back for the other hosts until
// its first sync: all but this host's share of the limit.
func reserveFor(limit uint64, hosts int) uint64 {
	if hosts <= 1 {
		return 0
	}
	return limit - shareOf(limit, hosts)
}

// shareOf is one host's share of a limit: rounded up, so the shares of all
// hosts cover the limit.
func shareOf(limit uint64, hosts int) uint64 {
	return (limit + uint64(hosts) - 1) / uint64(max(hosts, 1))
}

// setReserves writes the fixed windows' reserves for the live host count
// (on: false clears them), when they changed.
func (e *Engine) setReserves(on bool) error {
	want := map[uint32]uint64{}
	if on {
		for id, lv := range e.levels {
			if lv.Algorithm == xmaps.AlgFixedWindow {
				if r := reserveFor(lv.P2, e.hosts); r > 0 {
					want[id] = r
				}
			}
		}
	}
	if maps.Equal(want, e.reserves) {
		return nil
	}
	if err := e.dp.SetFleetReserves(want); err != nil {
		return fmt.Errorf("%w: %v", errDatapath, err)
	}
	e.reserves = want
	return nil
}

// fallback runs instead of the exchange while Redis is down. With
// fallback local, each host enforces the whole limit from its own state:
// what was taken is dropped, reserves are cleared, and the windows in
// course give back what they held for the other hosts. With fallback share,
// each host enforces the limit divided by the live hosts last known: a
// token bucket is charged, for each unit it admitted, the N-1 units the
// other hosts would have admitted at the same pace; fixed windows keep
// their reserve, which no sync releases.
func (e *Engine) fallback(takes []take, fws []fwSync) error {
	defer e.expireFW()
	if e.opts.Fleet.Fallback == policy.FallbackShare {
		return e.shareTB(takes)
	}
	if err := e.setReserves(false); err != nil {
		return err
	}
	var ops []xmaps.FleetOp
	for _, f := range fws {
		if f.k.applied == 0 {
			continue
		}
		op := fleetOp(f.key, f.k.lv, xmaps.FleetAdd)
		op.Arg0, op.Arg1 = f.k.seq, uint64(-int64(f.k.applied))
		ops = append(ops, op)
	}
	if len(ops) == 0 {
		return nil
	}
	if err := e.dp.FleetRun(ops); err != nil {
		return fmt.Errorf("%w: %v", errDatapath, err)
	}
	for _, op := range ops {
		if f := e.fw[op.Key]; f != nil && op.Done && !op.Stale {
			f.applied = 0
		}
	}
	return nil
}

// shareTB charges each token-bucket key that admitted since the last sync
// the other hosts' presumed share: its pending units times hosts-1.
func (e *Engine) shareTB(takes []take) error {
	if e.hosts <= 1 {
		return nil
	}
	var ops []xmaps.FleetOp
	for _, t := range takes {
		if t.pending == 0 {
			continue
		}
		op := fleetOp(t.key, t.lv, xmaps.FleetFoldTAT)
		op.Arg0 = t.tat + t.pending*uint64(e.hosts-1)*t.lv.intervalTU
		op.Arg1 = t.lv.intervalTU
		ops = append(ops, op)
	}
	if len(ops) == 0 {
		return nil
	}
	if err := e.dp.FleetRun(ops); err != nil {
		return fmt.Errorf("%w: %v", errDatapath, err)
	}
	return nil
}
