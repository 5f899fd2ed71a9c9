// SPDX-License-Identifier: Apache-2.0

package maps

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
)

// Reset returns every map of the limiter, and its writable globals, to what
// Load gives a new limiter: state tables, bans, lists and counters empty,
// no policy in force, the layout's metadata and fresh random seeds written
// again. The program stays loaded with the load-time constants it had.
//
// Verifying the program is most of what a load costs (a third of a second
// here, seconds under emulation), so a test binary loads each build once
// and resets it between cases (internal/testkit/xdpltest). Nothing may run
// the program meanwhile: an attached or pinned limiter is never reset.
func (l *Limiter) Reset() error {
	wiped, err := l.runWipe()
	if err != nil {
		return err
	}
	for _, e := range mapList {
		if wiped[e.name] {
			continue
		}
		if err := wipe(e.of(&l.objs.XdplimitMaps)); err != nil {
			return fmt.Errorf("resetting %s: %w", e.name, err)
		}
	}
	if err := l.zeroGlobals(); err != nil {
		return err
	}
	if l.fleetKeys != nil {
		l.fleetKeys.Close()
		l.fleetKeys = nil
	}
	l.srcMu.Lock()
	l.srcGen = nil
	l.srcMu.Unlock()
	return l.initNew(Meta{})
}

// runWipe zeroes the large arrays with the wipe program (bpf/wipe.bpf.c),
// loaded onto the limiter's maps at the first call, and names the maps it
// zeroed.
func (l *Limiter) runWipe() (map[string]bool, error) {
	if l.wipe == nil {
		var err error
		if l.wipe, l.wipeSpec, err = loadWipe(l.mapsByName(), ebpf.ProgramOptions{}); err != nil {
			return nil, err
		}
	}
	// XDP's test run wants at least an Ethernet header's worth of frame.
	if _, err := l.wipe.Run(&ebpf.RunOptions{Data: make([]byte, 64), Repeat: 1}); err != nil {
		return nil, fmt.Errorf("running the wipe program: %w", err)
	}
	// The maps its code loads, of all those the shared header declares.
	wiped := make(map[string]bool)
	for _, ins := range l.wipeSpec.Instructions {
		if ins.IsLoadFromMap() {
			wiped[ins.Reference()] = true
		}
	}
	return wiped, nil
}

// zeroGlobals zeroes the program's writable globals (the coarse clock's
// offset, measured by the first packet after a load).
func (l *Limiter) zeroGlobals() error {
	vars := reflect.ValueOf(&l.objs.XdplimitVariables).Elem()
	for i := range vars.NumField() {
		v, ok := vars.Field(i).Interface().(*ebpf.Variable)
		if !ok || v == nil || v.ReadOnly() {
			continue
		}
		if err := v.Set(make([]byte, v.Size())); err != nil {
			return fmt.Errorf("resetting %s: %w", v, err)
		}
	}
	return nil
}

// wipe empties m the way its type allows: an array's slots are zeroed, a
// hash's entries deleted, a trie's deleted one by one (tries have no batch
// operations), a ring read to its end.
func wipe(m *ebpf.Map) error {
	switch m.Type() {
	case ebpf.Array, ebpf.PerCPUArray:
		return zeroArray(m)
	case ebpf.Hash, ebpf.LRUHash:
		return deleteBatches(m)
	case ebpf.LPMTrie:
		return deleteEach(m)
	case ebpf.RingBuf:
		return drainRing(m)
	}
	return fmt.Errorf("no way to reset a map of type %s", m.Type())
}

// bytesOf is a slice of n values of size bytes each, zeroed: what the batch
// calls take for a map whose value type is only known at run time.
func bytesOf(n, size int) any {
	return reflect.MakeSlice(reflect.SliceOf(reflect.ArrayOf(size, reflect.TypeFor[byte]())), n, n).Interface()
}

func zeroArray(m *ebpf.Map) error {
	n := int(m.MaxEntries())
	keys := make([]uint32, n)
	for i := range keys {
		keys[i] = uint32(i)
	}
	values := n
	if m.Type() == ebpf.PerCPUArray {
		values *= ebpf.MustPossibleCPU()
	}
	_, err := m.BatchUpdate(keys, bytesOf(values, int(m.ValueSize())), nil)
	return err
}

func deleteBatches(m *ebpf.Map) error {
	const chunk = 4096
	keys := bytesOf(chunk, int(m.KeySize()))
	values := bytesOf(chunk, int(m.ValueSize()))
	var cursor ebpf.MapBatchCursor
	for {
		_, err := m.BatchLookupAndDelete(&cursor, keys, values, nil)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func deleteEach(m *ebpf.Map) error {
	var keys [][]byte
	key := make([]byte, m.KeySize())
	var prev any // nil: the first key
	for {
		if err := m.NextKey(prev, &key); errors.Is(err, ebpf.ErrKeyNotExist) {
			break
		} else if err != nil {
			return err
		}
		keys = append(keys, append([]byte(nil), key...))
		prev = keys[len(keys)-1]
	}
	for _, k := range keys {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
	}
	return nil
}

func drainRing(m *ebpf.Map) error {
	r, err := ringbuf.NewReader(m)
	if err != nil {
		return err
	}
	defer r.Close()
	r.SetDeadline(time.Now())
	var rec ringbuf.Record
	for {
		if err := r.ReadInto(&rec); errors.Is(err, os.ErrDeadlineExceeded) {
			return nil
		} else if err != nil {
			return err
		}
	}
}
