// SPDX-License-Identifier: Apache-2.0

package maps

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/gen"
	"github.com/xdplimit/xdplimit/internal/fmix"
)

// The IPv4 state table (bpf/table4.h) from user space: an array of sets of
// Ways4 keys, a key's set chosen by a keyed hash whose seed the metadata
// keeps with the table.

// Ways4 is how many keys a set of the IPv4 table holds.
const Ways4 = int(gen.XdplimitXdplConstXDPL_WAYS4)

// sets4 is the number of sets that hold n keys: a power of two (the
// datapath masks the hash), at least one.
func sets4(n uint32) uint32 {
	s := (uint64(n) + uint64(Ways4) - 1) / uint64(Ways4)
	if s <= 1 {
		return 1
	}
	return uint32(1) << bits.Len64(s-1)
}

// capacity4 is how many keys the IPv4 table m holds.
func capacity4(m *ebpf.Map) uint32 {
	return m.MaxEntries() * uint32(Ways4)
}

// key4Word is the word a set holds for a level's key of an IPv4 source
// (bpf/table4.h's xdpl_key4_word); addr is in the packet's byte order, as
// the datapath reads it.
func key4Word(stateID, addr uint32) uint64 {
	return uint64(stateID)<<32 | uint64(addr)
}

// fmix64 is bpf/hash.h's xdpl_fmix64.
var fmix64 = fmix.Fmix64

// newTable4Seed is a fresh table's seed.
func newTable4Seed() (uint64, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return 0, err
	}
	return binary.NativeEndian.Uint64(b[:]), nil
}

// table4Seed is the seed a program loaded onto opts.Pinned must hash with:
// the pinned table's, kept in the pinned metadata, else a new one.
func table4Seed(pinned map[string]*ebpf.Map) (uint64, error) {
	meta, ok := pinned[gen.XdplimitMapXdplMeta]
	if _, kept := pinned[Sources4Map]; !ok || !kept {
		return newTable4Seed()
	}
	var g gen.XdplimitXdplMetadata
	if err := meta.Lookup(uint32(0), &g); err != nil {
		return 0, fmt.Errorf("reading the pinned metadata: %w", err)
	}
	if g.LayoutVersion != LayoutVersion {
		return newTable4Seed()
	}
	return g.Table4Seed, nil
}

// setTable4 sets the table's load-time constants in spec, where its
// program reads the table: the seed and the sets' mask.
func setTable4(spec *ebpf.CollectionSpec, seed uint64) error {
	sets := spec.Maps[Sources4Map].MaxEntries
	if sets == 0 || sets&(sets-1) != 0 {
		return fmt.Errorf("the IPv4 state table's %d sets are not a power of two", sets)
	}
	if v, ok := spec.Variables[gen.XdplimitVarXdplTable4Seed]; ok {
		if err := v.Set(seed); err != nil {
			return err
		}
		return spec.Variables[gen.XdplimitVarXdplTable4Mask].Set(sets - 1)
	}
	return nil
}

// set4 is the set that holds key word kw, as bpf/table4.h's xdpl_set4_of
// finds it.
func (l *Limiter) set4(kw uint64) uint32 {
	return uint32(fmix64(l.table4Seed^kw)) & (l.objs.XdplSources4.MaxEntries() - 1)
}

// lookup4 reads the state of a level's key of an IPv4 source; ok is false
// when the table does not hold it.
func (l *Limiter) lookup4(stateID, addr uint32) (st gen.XdplimitXdplState, ok bool, err error) {
	kw := key4Word(stateID, addr)
	i := l.set4(kw)
	var set gen.XdplimitXdplSet4
	if err := l.objs.XdplSources4.Lookup(&i, &set); err != nil {
		return st, false, err
	}
	for w, k := range set.Key {
		if k == kw {
			return set.St[w], true, nil
		}
	}
	return st, false, nil
}

// WalkIPv4States calls fn with each key of the IPv4 state table (its
// level's state id, the source in the packet's byte order) and its state.
func (l *Limiter) WalkIPv4States(fn func(stateID, addr uint32, s gen.XdplimitXdplState)) error {
	return walk4(l.objs.XdplSources4, fn)
}

// walk4 calls fn with each key's state id, source and state in the IPv4
// table, reading it a batch of sets at a time.
func walk4(m *ebpf.Map, fn func(stateID, addr uint32, s gen.XdplimitXdplState)) error {
	const chunk = 1024
	keys, sets := make([]uint32, chunk), make([]gen.XdplimitXdplSet4, chunk)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := m.BatchLookup(&cursor, keys, sets, nil)
		for _, set := range sets[:n] {
			for w, k := range set.Key {
				if k != 0 {
					fn(uint32(k>>32), uint32(k), set.St[w])
				}
			}
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the IPv4 state table: %w", err)
		}
	}
}

// Capacity4 is how many keys a pinned IPv4 state table holds, of this
// layout or of one whose table was a kernel LRU hash.
func Capacity4(m *ebpf.Map) uint32 {
	if m.Type() == ebpf.Array {
		return capacity4(m)
	}
	return m.MaxEntries()
}
