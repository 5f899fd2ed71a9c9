// SPDX-License-Identifier: Apache-2.0

package maps

import (
	"errors"
	"fmt"
	"math/bits"
	"net/netip"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/gen"
	"github.com/xdplimit/xdplimit/model"
)

// The rules and levels of one source for Limiter.Source: which rules of the
// generation in force the address can match, and what each of their levels
// holds for its key and allows now.

// sourceGen is what Source reads of a generation beside the state: its
// rules, and the rules each family's protocols can match. It changes only
// with the generation's sequence number (Apply and the ban lookup switch
// write a new one), so a limiter that answers queries keeps it.
type sourceGen struct {
	gen, seq uint32
	rules    []installed
	family   [2]Bitmap // IPv4, IPv6: the rules some protocol of the family matches
}

// generationOf is generation g's sourceGen, read again when its sequence
// number moved.
func (l *Limiter) generationOf(g uint32, ctl gen.XdplimitXdplControl) (*sourceGen, error) {
	seq := ctl.Gen[g].Seq
	l.srcMu.Lock()
	defer l.srcMu.Unlock()
	if c := l.srcGen; c != nil && c.gen == g && c.seq == seq && seq != 0 {
		return c, nil
	}
	c := &sourceGen{gen: g, seq: seq}
	var err error
	if c.rules, err = l.inForce(g, ctl); err != nil {
		return nil, err
	}
	if ctl.Gen[g].Dims&DimProto != 0 {
		keys := make([]uint32, ProtoSlots)
		vals := make([]Bitmap, ProtoSlots)
		for i := range keys {
			keys[i] = g*ProtoSlots + uint32(i)
		}
		if err := lookupAll(l.objs.XdplProto, keys, vals); err != nil {
			return nil, fmt.Errorf("protocols: %w", err)
		}
		for i, v := range vals {
			for w := range v.W {
				c.family[i/256].W[w] |= v.W[w]
			}
		}
	}
	l.srcGen = c
	return c, nil
}

// rulesOf is the bitmap of the rules of generation g addr can match: as
// its source prefix and its family's protocols classify it.
func (l *Limiter) rulesOf(g uint32, cfg gen.XdplimitXdplGenCfg, gc *sourceGen, addr netip.Addr) (Bitmap, error) {
	var all Bitmap
	for i := 0; i < int(cfg.Nrules) && i < MaxRules; i++ {
		SetBit(&all, i)
	}
	if cfg.Dims&DimSrc != 0 {
		var src Bitmap
		var err error
		if addr.Is4() {
			err = l.objs.XdplSrc4.Lookup(&gen.XdplimitXdplLpm4{Prefixlen: 8 + 32, Gen: uint8(g), Addr: addr.As4()}, &src)
		} else {
			err = l.objs.XdplSrc6.Lookup(&gen.XdplimitXdplLpm6{Prefixlen: 8 + 128, Gen: uint8(g), Addr: addr.As16()}, &src)
		}
		if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return all, fmt.Errorf("source prefixes: %w", err)
		}
		and(&all, src)
	}
	if cfg.Dims&DimProto != 0 {
		fam := 0
		if addr.Is6() {
			fam = 1
		}
		and(&all, gc.family[fam])
	}
	return all, nil
}

func and(b *Bitmap, o Bitmap) {
	for w := range b.W {
		b.W[w] &= o.W[w]
	}
}

// lookupAll reads keys (consecutive, ascending) of an array into vals: in
// one batch from the array's start where the kernel can, else one by one.
func lookupAll(m *ebpf.Map, keys []uint32, vals []Bitmap) error {
	n := int(keys[len(keys)-1]) + 1
	ks, vs := make([]uint32, n), make([]Bitmap, n)
	got, err := m.BatchLookup(new(ebpf.MapBatchCursor), ks, vs, nil)
	if (err == nil || errors.Is(err, ebpf.ErrKeyNotExist)) && got == n {
		for i, k := range ks {
			if k >= keys[0] && int(k) < n {
				vals[k-keys[0]] = vs[i]
			}
		}
		return nil
	}
	for i, k := range keys {
		if err := m.Lookup(k, &vals[i]); err != nil {
			return err
		}
	}
	return nil
}

// sourceLevel reads the state of the key addr (and port) maps to at level
// lv, and what it allows at now.
func (l *Limiter) sourceLevel(lv gen.XdplimitXdplLevel, addr netip.Addr, port uint16, now uint64,
	trackAfter uint32) (SourceLevel, error) {
	sl := SourceLevel{Origin: int(lv.Origin), Key: KeyName(lv.KeyKind), Algorithm: AlgorithmName(lv.Algorithm),
		Bytes: lv.Flags&lfBytes != 0}
	p := model.Params{Algorithm: lv.Algorithm, P1: lv.P1, P2: lv.P2, P3: lv.P3}
	if lv.Flags&lfFleet != 0 && lv.Algorithm == AlgFixedWindow {
		if err := l.objs.XdplFleetReserve.Lookup(lv.StateId, &p.Reserve); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return sl, err
		}
	}
	var st gen.XdplimitXdplState
	var err error
	switch {
	case lv.KeyKind == KeyGlobal:
		err = l.objs.XdplGlobals.Lookup(lv.Slot, &st)
		sl.Known, sl.Tracked = err == nil, err == nil
	case (lv.KeyKind == KeySrcDport || lv.KeyKind == KeySrcSport) && port == 0:
		sl.Prefix = maskedPrefix(lv, addr)
	default:
		sl.Prefix = maskedPrefix(lv, addr)
		sl.Known = true
		sl.Sketch = trackAfter > 1 && lv.Flags&lfTrackFirst == 0
		k := gen.XdplimitXdplKey{StateId: lv.StateId, Family: 4}
		if addr.Is6() {
			k.Family = 6
			k.Addr = words16(sl.Prefix.Addr())
		} else {
			k.Addr[0] = words4(sl.Prefix.Addr())
		}
		if lv.KeyKind != KeySrc {
			k.Port = port
		}
		if k.Family == 4 && k.Port == 0 {
			st, sl.Tracked, err = l.lookup4(k.StateId, k.Addr[0])
		} else {
			err = l.objs.XdplSources.Lookup(&k, &st)
			sl.Tracked = err == nil
		}
	}
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return sl, err
	}
	if !sl.Known {
		sl.Budget = model.State{}.Budget(p, now)
		sl.Remaining, sl.RetryAfter, sl.Reset = 0, 0, 0
		return sl, nil
	}
	ms := model.State{A: st.A, B: st.B}
	if sl.Tracked && lv.Algorithm == model.AlgSlidingLog && st.A != 0 {
		var g gen.XdplimitXdplLog
		if err := l.objs.XdplLogs.Lookup(st.A, &g); err == nil {
			ms.Log = model.Log{Seq: g.Seq, T: g.T}
		} else if !errors.Is(err, ebpf.ErrKeyNotExist) {
			return sl, err
		}
	}
	sl.Budget = ms.Budget(p, now)
	return sl, nil
}

// maskedPrefix is the source prefix a per-source level's key holds.
func maskedPrefix(lv gen.XdplimitXdplLevel, addr netip.Addr) netip.Prefix {
	n := 0
	if addr.Is4() {
		n = bits.OnesCount32(lv.Mask4)
	} else {
		for _, w := range lv.Mask6 {
			n += bits.OnesCount32(w)
		}
	}
	p, _ := addr.Prefix(n)
	return p
}

// KeyName names a level's key kind as the policy language does.
func KeyName(kind uint8) string {
	switch kind {
	case KeySrc:
		return "src_ip"
	case KeySrcDport:
		return "src_ip+dst_port"
	case KeySrcSport:
		return "src_ip+src_port"
	case KeyGlobal:
		return "global"
	}
	return fmt.Sprintf("key(%d)", kind)
}

// AlgorithmName names a level's algorithm as the policy language does.
func AlgorithmName(alg uint8) string {
	switch alg {
	case model.AlgTokenBucket:
		return "token_bucket"
	case model.AlgFixedWindow:
		return "fixed_window"
	case model.AlgSlidingWindow:
		return "sliding_window"
	case model.AlgSlidingLog:
		return "sliding_log"
	}
	return fmt.Sprintf("algorithm(%d)", alg)
}
