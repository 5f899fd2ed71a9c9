package maps

import (
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/gen"
)

// TrackedSources counts the state tables' entries by walking them: for the
// CLI, not for a scrape path.
func (l *Limiter) TrackedSources() (int, error) {
	n := 0
	var k4 gen.XdplimitXdplKey4
	var k gen.XdplimitXdplKey
	var v gen.XdplimitXdplState
	it := l.objs.XdplSources4.Iterate()
	for it.Next(&k4, &v) {
		n++
	}
	if err := it.Err(); err != nil {
		return n, err
	}
	it = l.objs.XdplSources.Iterate()
	for it.Next(&k, &v) {
		n++
	}
	return n, it.Err()
}

// SourcesCapacity is the state tables' size: IPv4 per-source keys plus
// every other key.
func (l *Limiter) SourcesCapacity() uint32 {
	return l.objs.XdplSources4.MaxEntries() + l.objs.XdplSources.MaxEntries()
}

// SourcesCapacities is each table's size: IPv4 per-source keys, and others.
func (l *Limiter) SourcesCapacities() (ipv4, other uint32) {
	return l.objs.XdplSources4.MaxEntries(), l.objs.XdplSources.MaxEntries()
}

// OpenPinned opens the maps of a running limiter without loading a program,
// for reading its state (status, metrics of another process).
func OpenPinned(pinned map[string]*ebpf.Map) (*Limiter, error) {
	spec, err := gen.LoadXdplimit()
	if err != nil {
		return nil, err
	}
	if err := checkPinnedLayout(pinned); err != nil {
		return nil, err
	}
	sizeFromPinned(spec, pinned)
	l := &Limiter{tickNs: CoarseTick()}
	if err := spec.LoadAndAssign(&l.objs.XdplimitMaps, &ebpf.CollectionOptions{MapReplacements: pinned}); err != nil {
		return nil, fmt.Errorf("opening pinned maps: %w", err)
	}
	meta, err := l.Meta()
	if err != nil {
		l.Close()
		return nil, err
	}
	if meta.LayoutVersion != LayoutVersion {
		l.Close()
		return nil, fmt.Errorf("pinned maps have layout version %d, this xdplimit reads %d", meta.LayoutVersion, LayoutVersion)
	}
	l.clock = meta.Clock
	return l, nil
}
