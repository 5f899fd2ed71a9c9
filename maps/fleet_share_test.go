// SPDX-License-Identifier: Apache-2.0

package maps_test

import (
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/maps"
)

// A fleet token bucket's local share on the real program.
// shareRig is a limiter with one fleet token bucket (100/s, burst 100) and
// a share of a third of it reporting at half its burst: 30 ms a unit, 500
// ms of lead, a crossing carrying 17 units; and one source's frame.
type shareRig struct {
	t   *testing.T
	l   *maps.Limiter
	id  uint32
	key maps.FleetKey
	pkt []byte
}

func newShareRig(t *testing.T) *shareRig {
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
	if err := l.SetFleetEpoch(3); err != nil {
		t.Fatal(err)
	}
	if err := l.SetFleetShares(map[uint32]maps.FleetShare{fls[0].StateID: {Inc: 3 * fls[0].P1, Tol: 500 * 1e6, Cross: 17}}); err != nil {
		t.Fatal(err)
	}
	return &shareRig{t: t, l: l, id: fls[0].StateID, pkt: udp4("198.51.100.7").MustBuild(),
		key: maps.FleetKey{StateID: fls[0].StateID, Family: 4, Addr: [16]byte{198, 51, 100, 7}}}
}

func (r *shareRig) reported() int {
	n, err := r.l.DrainFleetKeys(100, func(maps.FleetKey) {})
	if err != nil {
		r.t.Fatal(err)
	}
	return n
}

func (r *shareRig) op(kind maps.FleetOpKind) maps.FleetOp {
	ops := []maps.FleetOp{{Key: r.key, Kind: kind}}
	if err := r.l.FleetRun(ops); err != nil || !ops[0].Done || ops[0].Missing {
		r.t.Fatalf("op %d: %+v %v", kind, ops[0], err)
	}
	return ops[0]
}

func (r *shareRig) within() int {
	n, err := r.l.FleetWithinShare(map[uint32]bool{r.id: true})
	if err != nil {
		r.t.Fatal(err)
	}
	return n[r.id]
}

// A key within its share reports nothing and has nothing to take; the
// admission that uses half the share's burst reports it and leaves the
// share's excess pending.
func TestFleetShareCrossing(t *testing.T) {
	r := newShareRig(t)
	now := t0
	for range 20 { // 1 packet every 40 ms: below the share's rate
		if v := xdpltest.Run(t, r.l, r.pkt, now); v != xdpPass {
			t.Fatalf("refused at %v", now)
		}
		now += 40 * time.Millisecond
	}
	if n := r.reported(); n != 0 {
		t.Errorf("a key below its share reported %d times", n)
	}
	if p := r.op(maps.FleetTake).Out0; p != 0 || r.within() != 1 {
		t.Errorf("below its share: pending %d, within %d; want 0 and 1", p, r.within())
	}
	// 1 packet a ms: the lead grows 29 ms a packet and passes 500 ms at
	// the 18th; that one reports and carries 17 + itself.
	sent := 0
	for ; sent < 30 && r.reported() == 0; sent++ {
		xdpltest.Run(t, r.l, r.pkt, now)
		now += time.Millisecond
	}
	if sent < 17 || sent > 19 {
		t.Errorf("crossed after %d packets at 1/ms, want 18", sent)
	}
	xdpltest.Run(t, r.l, r.pkt, now)
	if p := r.op(maps.FleetTake).Out0; p != 19 || r.within() != 0 {
		t.Errorf("crossed: pending %d, within %d; want 17 + 2 and 0", p, r.within())
	}
}

// COOL puts a key back within its share, HEAT in the exchange; a key whose
// share is removed starts its pending units from its next packet, not from
// the time its word held.
func TestFleetShareHeatCool(t *testing.T) {
	r := newShareRig(t)
	now := t0
	xdpltest.Run(t, r.l, r.pkt, now)
	if o := r.op(maps.FleetHeat); o.Out0 != 1 || r.within() != 0 {
		t.Errorf("heat: %+v, within %d; want out0 1 and 0", o, r.within())
	}
	now += time.Second
	xdpltest.Run(t, r.l, r.pkt, now)
	xdpltest.Run(t, r.l, r.pkt, now)
	if n := r.reported(); n != 1 {
		t.Errorf("the heated key's admissions reported %d times, want once", n)
	}
	if p := r.op(maps.FleetCool).Out0; p != 2 || r.within() != 1 {
		t.Errorf("cool: took %d, within %d; want 2 and 1", p, r.within())
	}
	now += time.Second
	xdpltest.Run(t, r.l, r.pkt, now)
	if n := r.reported(); n != 0 {
		t.Errorf("a cooled key reported %d times", n)
	}
	// Within its share, the word holds a time.
	if err := r.l.SetFleetShares(nil); err != nil {
		t.Fatal(err)
	}
	now += time.Second
	xdpltest.Run(t, r.l, r.pkt, now)
	if p := r.op(maps.FleetTake).Out0; p != 1 {
		t.Errorf("after the share was removed: pending %d, want 1", p)
	}
}
