// SPDX-License-Identifier: Apache-2.0

package maps_test

import (
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/maps"
)

// A fleet token bucket's local share on the real program: a key within its
// share reports nothing and has nothing to take; the admission that uses
// report_at of the share's burst reports it and leaves the share's excess
// pending; COOL puts it back within its share, HEAT in the exchange; and a
// key whose share is removed starts its pending units from its next
// packet, not from the time its word held.
func TestFleetShareDatapath(t *testing.T) {
	l := loadWith(t, maps.Options{Clock: maps.ClockMap}, `
fleet: {redis: redis://127.0.0.1:1/0}
rules:
  - name: dns
    match: {protocol: udp, dst_ports: [53]}
    limit: {algorithm: token_bucket, rate: 100/s, burst: 100, scope: fleet}
`)
	fls, err := l.FleetLevels()
	if err != nil || len(fls) != 1 {
		t.Fatalf("fleet levels: %v %v", fls, err)
	}
	lv := fls[0]
	if err := l.SetFleetEpoch(3); err != nil {
		t.Fatal(err)
	}
	// A third of the limit, reporting at half the share's burst: 30 ms a
	// unit, 500 ms of lead, a crossing carrying 17 units.
	T := lv.P1 // ns << FPShift per unit
	if err := l.SetFleetShares(map[uint32]maps.FleetShare{lv.StateID: {Inc: 3 * T, Tol: 500 * 1e6, Cross: 17}}); err != nil {
		t.Fatal(err)
	}
	pkt := udp4("198.51.100.7").MustBuild()
	key := maps.FleetKey{StateID: lv.StateID, Family: 4, Addr: [16]byte{198, 51, 100, 7}}
	reported := func() int {
		n, err := l.DrainFleetKeys(100, func(maps.FleetKey) {})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	op := func(kind maps.FleetOpKind) maps.FleetOp {
		ops := []maps.FleetOp{{Key: key, Kind: kind}}
		if err := l.FleetRun(ops); err != nil || !ops[0].Done || ops[0].Missing {
			t.Fatalf("op %d: %+v %v", kind, ops[0], err)
		}
		return ops[0]
	}
	within := func() int {
		n, err := l.FleetWithinShare(map[uint32]bool{lv.StateID: true})
		if err != nil {
			t.Fatal(err)
		}
		return n[lv.StateID]
	}
	// 1 packet every 40 ms: below the share's rate, never crosses.
	now := t0
	for range 20 {
		if v := xdpltest.Run(t, l, pkt, now); v != xdpPass {
			t.Fatalf("refused at %v", now)
		}
		now += 40 * time.Millisecond
	}
	if n := reported(); n != 0 {
		t.Errorf("a key below its share reported %d times", n)
	}
	if p := op(maps.FleetTake).Out0; p != 0 || within() != 1 {
		t.Errorf("below its share: pending %d, within %d; want 0 and 1", p, within())
	}
	// 1 packet a ms: the lead grows 29 ms a packet and passes 500 ms at
	// the 18th; that one reports and carries 17 + itself.
	sent := 0
	for ; sent < 30 && reported() == 0; sent++ {
		xdpltest.Run(t, l, pkt, now)
		now += time.Millisecond
	}
	if sent < 17 || sent > 19 {
		t.Errorf("crossed after %d packets at 1/ms, want 18", sent)
	}
	xdpltest.Run(t, l, pkt, now)
	if p := op(maps.FleetTake).Out0; p != 19 || within() != 0 {
		t.Errorf("crossed: pending %d, within %d; want 17 + 2 and 0", p, within())
	}
	xdpltest.Run(t, l, pkt, now)
	if p := op(maps.FleetCool).Out0; p != 1 || within() != 1 {
		t.Errorf("cool: took %d, within %d; want 1 and 1", p, within())
	}
	if o := op(maps.FleetHeat); o.Out0 != 1 || within() != 0 {
		t.Errorf("heat: %+v, within %d", o, within())
	}
	now += time.Second
	xdpltest.Run(t, l, pkt, now)
	if n := reported(); n != 1 {
		t.Errorf("a heated key's admission reported %d times, want 1", n)
	}
	op(maps.FleetCool)
	now += time.Second
	xdpltest.Run(t, l, pkt, now) // within its share: the word holds a time
	// The share removed: the next admission starts the pending units
	// afresh.
	if err := l.SetFleetShares(nil); err != nil {
		t.Fatal(err)
	}
	now += time.Second
	xdpltest.Run(t, l, pkt, now)
	if p := op(maps.FleetTake).Out0; p != 1 {
		t.Errorf("after the share was removed: pending %d, want 1", p)
	}
}
