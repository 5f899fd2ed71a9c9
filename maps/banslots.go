// SPDX-License-Identifier: Apache-2.0

package maps

import (
	"container/heap"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/gen"
)

// BanRequest is one ban for BanAll.
type BanRequest struct {
	Prefix netip.Prefix
	For    time.Duration
	Reason string // printable as it is (CheckBan)
}

// BanResult is what became of one BanRequest.
type BanResult struct {
	// Replaced is the prefix whose ban in force gave up its slot (the
	// table was full), if any.
	Replaced netip.Prefix
	// Err is why this request was not applied: refused by CheckBan, or by
	// the kernel (a trie full). The other requests are applied whatever it.
	Err error
}

// BanAll applies many bans as Ban applies one, reading the table once: a
// feed applies up to thousands per sync, and reading the whole table for
// each (15 MiB at 65536 slots) would stall it. A request that fails leaves
// its slot as it was; the error BanAll returns is one that stopped every
// request (the table could not be read), or the bookkeeping after them.
func (l *Limiter) BanAll(reqs []BanRequest) ([]BanResult, error) {
	l.banMu.Lock()
	defer l.banMu.Unlock()
	res := make([]BanResult, len(reqs))
	now, err := l.now()
	if err != nil {
		return nil, err
	}
	slots, err := l.slots()
	if err != nil {
		return nil, err
	}
	pk := newSlotPicker(slots, now)
	applied := 0
	for i, r := range reqs {
		if res[i].Err = CheckBan(r.Prefix, r.For, r.Reason); res[i].Err != nil {
			continue
		}
		res[i].Replaced, res[i].Err = l.banSlot(pk, CanonicalBanPrefix(r.Prefix), r.For, r.Reason, now)
		if res[i].Err == nil {
			applied++
		}
	}
	if applied == 0 {
		return res, nil
	}
	if err := l.moveBanEpoch(); err != nil {
		return res, err
	}
	return res, l.countManualBans(uint64(applied))
}

// banSlot writes one manual ban of p into the slot the picker gives it.
func (l *Limiter) banSlot(pk *slotPicker, p netip.Prefix, d time.Duration, reason string, now uint64) (replaced netip.Prefix, err error) {
	b := gen.XdplimitXdplBan{ExpiresNs: now + uint64(d), StartedNs: now, Origin: banManual}
	setBanPrefix(&b, p)
	for i := 0; i < len(reason); i++ {
		b.Reason[i] = int8(reason[i])
	}
	return l.putSlot(pk, &b)
}

// putSlot writes ban b into the slot the picker gives its prefix, and
// links it into its trie; replaced is the prefix that lost its ban.
func (l *Limiter) putSlot(pk *slotPicker, b *gen.XdplimitXdplBan) (replaced netip.Prefix, err error) {
	p := banPrefix(b)
	slot, victim := pk.pick(p)
	old := pk.slots[slot]
	if victim {
		replaced = banPrefix(&old)
	}
	if old.ExpiresNs != 0 && banPrefix(&old) != p {
		if err := l.unlink(&old); err != nil {
			return netip.Prefix{}, err
		}
	}
	if err := l.objs.XdplBans.Update(slot, b, ebpf.UpdateAny); err != nil {
		return netip.Prefix{}, err
	}
	if err := l.link(b, slot); err != nil {
		// Not in the trie, the ban is never looked up: free the slot
		// rather than list a ban that is not enforced.
		_ = l.objs.XdplBans.Update(slot, &gen.XdplimitXdplBan{}, ebpf.UpdateAny)
		pk.set(slot, gen.XdplimitXdplBan{})
		return netip.Prefix{}, err
	}
	pk.set(slot, *b)
	return replaced, nil
}

// slotPicker chooses ban slots as the table fills: p's own slot, else the
// first free one, else the live one ending first (its ban is replaced).
// It indexes the table once, so a batch of bans costs one read of it.
type slotPicker struct {
	slots []gen.XdplimitXdplBan
	now   uint64
	own   map[netip.Prefix]uint32 // the first slot holding each prefix, live or not
	free  []uint32                // slots not in force, lowest first
	next  int                     // free[next] is the next free slot
	ends  endHeap                 // live slots by end; entries of rewritten slots are skipped
}

func newSlotPicker(slots []gen.XdplimitXdplBan, now uint64) *slotPicker {
	pk := &slotPicker{slots: slots, now: now, own: map[netip.Prefix]uint32{}}
	for i := range slots {
		b := &slots[i]
		if b.ExpiresNs != 0 {
			if _, ok := pk.own[banPrefix(b)]; !ok {
				pk.own[banPrefix(b)] = uint32(i)
			}
		}
		if live(b, now) {
			pk.ends = append(pk.ends, slotEnd{b.ExpiresNs, uint32(i)})
		} else {
			pk.free = append(pk.free, uint32(i))
		}
	}
	heap.Init(&pk.ends)
	return pk
}

func (pk *slotPicker) pick(p netip.Prefix) (slot uint32, victim bool) {
	if s, ok := pk.own[p]; ok {
		return s, false
	}
	for pk.next < len(pk.free) {
		s := pk.free[pk.next]
		pk.next++
		if !live(&pk.slots[s], pk.now) {
			return s, false
		}
	}
	for len(pk.ends) > 0 {
		e := heap.Pop(&pk.ends).(slotEnd)
		if b := &pk.slots[e.slot]; b.ExpiresNs == e.end && live(b, pk.now) {
			return e.slot, true
		}
	}
	return 0, true // unreachable: a table has at least BanWays slots
}

// set records what slot now holds.
func (pk *slotPicker) set(slot uint32, b gen.XdplimitXdplBan) {
	old := &pk.slots[slot]
	if old.ExpiresNs != 0 && pk.own[banPrefix(old)] == slot {
		delete(pk.own, banPrefix(old))
	}
	pk.slots[slot] = b
	if b.ExpiresNs == 0 {
		pk.free = append(pk.free, slot)
		return
	}
	pk.own[banPrefix(&b)] = slot
	heap.Push(&pk.ends, slotEnd{b.ExpiresNs, slot})
}

type slotEnd struct {
	end  uint64
	slot uint32
}

// endHeap orders live slots by end, then by slot (the lowest first, as
// a scan of the table would find them).
type endHeap []slotEnd

func (h endHeap) Len() int { return len(h) }
func (h endHeap) Less(i, j int) bool {
	return h[i].end < h[j].end || h[i].end == h[j].end && h[i].slot < h[j].slot
}
func (h endHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *endHeap) Push(x any)   { *h = append(*h, x.(slotEnd)) }
func (h *endHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
