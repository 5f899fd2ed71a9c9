// SPDX-License-Identifier: Apache-2.0

package maps

import (
	"errors"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/gen"
)

const fleetHot = uint64(1) << gen.XdplimitXdplConstXDPL_FLEET_HOT_BIT

// FleetWithinShare counts, for each state id in ids (fleet token-bucket
// levels with a local share), the keys of the state tables within their
// share: those the exchange never sees. It walks both tables in batches,
// so it costs a read of each: for a gauge, not for every sync.
func (l *Limiter) FleetWithinShare(ids map[uint32]bool) (map[uint32]int, error) {
	out := map[uint32]int{}
	count := func(id uint32, s gen.XdplimitXdplState) {
		if ids[id] && s.B&fleetHot == 0 {
			out[id]++
		}
	}
	if err := walk4(l.objs.XdplSources4, func(id, _ uint32, s gen.XdplimitXdplState) { count(id, s) }); err != nil {
		return nil, err
	}
	if err := walkStates(l.objs.XdplSources, func(k *gen.XdplimitXdplKey, s gen.XdplimitXdplState) { count(k.StateId, s) }); err != nil {
		return nil, err
	}
	return out, nil
}

// walkStates reads a state table in batches of 4096, one entry at a time
// where the kernel has no batch lookup.
func walkStates[K any](m *ebpf.Map, fn func(*K, gen.XdplimitXdplState)) error {
	keys, vals := make([]K, 4096), make([]gen.XdplimitXdplState, 4096)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := m.BatchLookup(&cursor, keys, vals, nil)
		for i := range n {
			fn(&keys[i], vals[i])
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if err == nil {
			continue
		}
		if n > 0 {
			return err
		}
		var k K
		var v gen.XdplimitXdplState
		it := m.Iterate()
		for it.Next(&k, &v) {
			fn(&k, v)
		}
		return it.Err()
	}
}
