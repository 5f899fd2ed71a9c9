// SPDX-License-Identifier: Apache-2.0

package maps

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/gen"
	"github.com/xdplimit/xdplimit/model"
)

// The datapath's side of fleet levels (bpf/fleet.h): the keys it reports,
// the sync epoch, and the apply program that takes and folds consumption
// (bpf/fleet_apply.bpf.c).

const (
	AlgTokenBucket = uint8(gen.XdplimitXdplConstXDPL_ALG_TOKEN_BUCKET)
	AlgFixedWindow = uint8(gen.XdplimitXdplConstXDPL_ALG_FIXED_WINDOW)
	TimeShift      = model.TimeShift
	FPShift        = model.FPShift
	WinCountBits   = model.CountBits
	WinCountMask   = uint64(1)<<model.CountBits - 1
	WinSeqMask     = uint64(1)<<model.SeqBits - 1

	lfFleet    = uint8(gen.XdplimitXdplConstXDPL_LF_FLEET)
	fleetBatch = int(gen.XdplimitXdplConstXDPL_FLEET_BATCH)
	fopGlobal  = uint16(gen.XdplimitXdplConstXDPL_FOP_GLOBAL)
	fopDone    = uint16(gen.XdplimitXdplConstXDPL_FOP_DONE)
	fopMissing = uint16(gen.XdplimitXdplConstXDPL_FOP_MISSING)
	fopStale   = uint16(gen.XdplimitXdplConstXDPL_FOP_STALE)
)

// FleetKey is a state entry's key as the datapath reports it.
type FleetKey struct {
	StateID uint32
	Port    uint16
	Family  uint8 // 4, 6, or 0 for a global level
	Addr    [16]byte
}

// fleetKeyOf decodes a reported key (struct xdpl_key as the datapath wrote
// it: the address in network order, the rest native).
func fleetKeyOf(raw []byte) FleetKey {
	ne := binary.NativeEndian
	fk := FleetKey{StateID: ne.Uint32(raw[0:]), Port: ne.Uint16(raw[4:]), Family: raw[6]}
	copy(fk.Addr[:], raw[8:24])
	return fk
}

func (k FleetKey) gen() gen.XdplimitXdplKey {
	g := gen.XdplimitXdplKey{StateId: k.StateID, Port: k.Port, Family: k.Family}
	for i := range g.Addr {
		// Addr[i] holds four bytes of the network-order address as a
		// native-endian word.
		g.Addr[i] = binary.NativeEndian.Uint32(k.Addr[4*i:])
	}
	return g
}

const (
	reportedKeySize = 24 // sizeof(struct xdpl_key)
	xdpPass         = 2
)

// FleetOpKind is what the apply program does to one entry.
type FleetOpKind uint16

const (
	FleetTake    = FleetOpKind(gen.XdplimitXdplConstXDPL_FLEET_TAKE)
	FleetFoldTAT = FleetOpKind(gen.XdplimitXdplConstXDPL_FLEET_FOLD_TAT)
	FleetRead    = FleetOpKind(gen.XdplimitXdplConstXDPL_FLEET_READ)
	FleetAdd     = FleetOpKind(gen.XdplimitXdplConstXDPL_FLEET_ADD)
	FleetHeat    = FleetOpKind(gen.XdplimitXdplConstXDPL_FLEET_HEAT)
	FleetCool    = FleetOpKind(gen.XdplimitXdplConstXDPL_FLEET_COOL)
)

// FleetEpochBits is how many of the sync epoch's low bits a state entry
// keeps: an epoch whose are all 0 is never put in force.
const FleetEpochBits = int(gen.XdplimitXdplConstXDPL_FLEET_EPOCH_BITS)

// FleetShare is a fleet token-bucket level's local share as the datapath
// tests it (struct xdpl_fleet_share): a key reports to the exchange once a
// bucket charged Inc per unit (ns << FPShift) runs more than Tol ns ahead
// of now, and carries Cross units into its first exchange.
type FleetShare struct {
	Inc, Tol, Cross uint64
}

// SetFleetShares sets the local shares of fleet token-bucket levels, by
// state id; levels not named exchange every key. A level whose slot (its
// state id's low bits) another named level holds gets none.
func (l *Limiter) SetFleetShares(shares map[uint32]FleetShare) error {
	n := uint32(gen.XdplimitXdplConstXDPL_FLEET_SHARE_SLOTS)
	want := make([]gen.XdplimitXdplFleetShare, n)
	for id, s := range shares {
		slot := id & (n - 1)
		if want[slot].StateId != 0 && want[slot].StateId < id {
			continue
		}
		want[slot] = gen.XdplimitXdplFleetShare{StateId: id, Inc: s.Inc, Tol: s.Tol, Cross: s.Cross}
	}
	for slot := range n {
		if err := l.objs.XdplFleetShares.Update(slot, &want[slot], ebpf.UpdateAny); err != nil {
			return fmt.Errorf("fleet share slot %d: %w", slot, err)
		}
	}
	return nil
}

// FleetOp is one entry of a batch for the apply program; Out0, Out1 and the
// flags are its answer. See bpf/fleet.h for each kind's arguments.
type FleetOp struct {
	Key                  FleetKey
	Global               bool
	Slot                 uint32
	Kind                 FleetOpKind
	Arg0, Arg1           uint64
	Out0, Out1           uint64
	Done, Missing, Stale bool
}

// FleetLevel is one fleet-scoped level of the policy in force.
type FleetLevel struct {
	Rule       string
	Origin     int
	StateID    uint32
	Algorithm  uint8
	KeyKind    uint8
	Global     bool
	Slot       uint32
	P1, P2, P3 uint64
	Mask4      uint32
	Mask6      [4]uint32
	Bytes      bool
}

// FleetLevels lists the fleet levels of the generation in force.
func (l *Limiter) FleetLevels() ([]FleetLevel, error) {
	rules, err := l.current()
	if err != nil {
		return nil, err
	}
	var out []FleetLevel
	for _, r := range rules {
		for _, lv := range r.levels {
			if lv.Flags&lfFleet == 0 {
				continue
			}
			out = append(out, FleetLevel{Rule: r.name, Origin: int(lv.Origin), StateID: lv.StateId,
				Algorithm: lv.Algorithm, KeyKind: lv.KeyKind, Global: lv.KeyKind == KeyGlobal,
				Slot: lv.Slot, P1: lv.P1, P2: lv.P2, P3: lv.P3, Mask4: lv.Mask4, Mask6: lv.Mask6,
				Bytes: lv.Flags&lfBytes != 0})
		}
	}
	return out, nil
}

// FleetEpoch is the sync epoch in force.
func (l *Limiter) FleetEpoch() (uint32, error) {
	var v gen.XdplimitXdplFleetSync
	err := l.objs.XdplFleetCtl.Lookup(uint32(0), &v)
	return v.Epoch, err
}

// SetFleetEpoch starts a sync epoch: a token-bucket key reports itself at
// its first admission in each epoch.
func (l *Limiter) SetFleetEpoch(e uint32) error {
	return l.objs.XdplFleetCtl.Update(uint32(0), &gen.XdplimitXdplFleetSync{Epoch: e}, ebpf.UpdateAny)
}

// FleetRun runs the apply program over ops, in batches, and writes its
// answers back into ops.
func (l *Limiter) FleetRun(ops []FleetOp) error {
	if l.fleetApply == nil {
		return errors.New("the fleet apply program is not loaded (pinned maps opened read-only)")
	}
	buf := make([]gen.XdplimitXdplFleetOp, 0, min(len(ops), fleetBatch))
	keys := make([]uint32, 0, cap(buf))
	for start := 0; start < len(ops); start += fleetBatch {
		batch := ops[start:min(len(ops), start+fleetBatch)]
		buf, keys = buf[:0], keys[:0]
		for i, op := range batch {
			g := gen.XdplimitXdplFleetOp{Key: op.Key.gen(), Slot: op.Slot, Op: uint16(op.Kind),
				Arg0: op.Arg0, Arg1: op.Arg1}
			if op.Global {
				g.Flags = fopGlobal
				g.Key = gen.XdplimitXdplKey{StateId: op.Key.StateID}
			}
			buf = append(buf, g)
			keys = append(keys, uint32(i))
		}
		if _, err := l.objs.XdplFleetBatch.BatchUpdate(keys, buf, &ebpf.BatchOptions{}); err != nil {
			return fmt.Errorf("writing the fleet batch: %w", err)
		}
		// The "packet": struct xdpl_fleet_run, 64 bytes (above the
		// Ethernet header size test-run asks of XDP).
		run := make([]byte, 64)
		binary.NativeEndian.PutUint32(run, uint32(len(batch)))
		ret, err := l.fleetApply.Run(&ebpf.RunOptions{Data: run})
		if err != nil {
			return fmt.Errorf("running the fleet apply program: %w", err)
		}
		if ret != xdpPass {
			return fmt.Errorf("the fleet apply program refused a batch of %d (verdict %d)", len(batch), ret)
		}
		var cursor ebpf.MapBatchCursor
		if _, err := l.objs.XdplFleetBatch.BatchLookup(&cursor, keys, buf, nil); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("reading the fleet batch: %w", err)
		}
		for i := range batch {
			op, g := &batch[i], &buf[i]
			op.Out0, op.Out1 = g.Out0, g.Out1
			op.Done = g.Flags&fopDone != 0
			op.Missing = g.Flags&fopMissing != 0
			op.Stale = g.Flags&fopStale != 0
		}
	}
	return nil
}

// SetFleetReserves sets the reserve that fleet fixed-window levels open
// their windows with, by state id; levels not named get none.
func (l *Limiter) SetFleetReserves(reserves map[uint32]uint64) error {
	m := l.objs.XdplFleetReserve
	var stale []uint32
	var k uint32
	var v uint64
	it := m.Iterate()
	for it.Next(&k, &v) {
		if _, ok := reserves[k]; !ok {
			stale = append(stale, k)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("reading fleet reserves: %w", err)
	}
	for id, r := range reserves {
		if err := m.Update(id, r, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("fleet reserve of state %d: %w", id, err)
		}
	}
	for _, id := range stale {
		if err := m.Delete(id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("fleet reserve of state %d: %w", id, err)
		}
	}
	return nil
}

// DrainFleetKeys calls fn for each key the datapath reported since the
// last call, at most max, without waiting. The ring's reader is opened at
// the first call and closed with the limiter.
func (l *Limiter) DrainFleetKeys(max int, fn func(FleetKey)) (int, error) {
	if l.fleetKeys == nil {
		r, err := ringbuf.NewReader(l.objs.XdplFleetKeys)
		if err != nil {
			return 0, fmt.Errorf("opening the fleet key ring: %w", err)
		}
		l.fleetKeys = r
	}
	f := l.fleetKeys
	f.SetDeadline(time.Now())
	var rec ringbuf.Record
	n := 0
	for n < max {
		if err := f.ReadInto(&rec); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return n, nil
			}
			return n, err
		}
		if len(rec.RawSample) < reportedKeySize {
			continue
		}
		fn(fleetKeyOf(rec.RawSample))
		n++
	}
	return n, nil
}

// wallOffset is the wall clock minus CLOCK_MONOTONIC (which both of the
// datapath's clocks follow). A fleet fixed window adds it, modulo the
// window, to the datapath's clock, so that its windows start when the wall
// clock's do: every host of a fleet then counts the same windows (to within
// their clocks' agreement).
func wallOffset() int64 {
	var mono, wall unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono)
	_ = unix.ClockGettime(unix.CLOCK_REALTIME, &wall)
	return wall.Nano() - mono.Nano()
}
