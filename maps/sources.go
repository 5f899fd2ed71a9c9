// SPDX-License-Identifier: Apache-2.0

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
	if err := walk4(l.objs.XdplSources4, func(uint32, uint32, gen.XdplimitXdplState) { n++ }); err != nil {
		return n, err
	}
	var k gen.XdplimitXdplKey
	var v gen.XdplimitXdplState
	it := l.objs.XdplSources.Iterate()
	for it.Next(&k, &v) {
		n++
	}
	return n, it.Err()
}

// SourcesCapacity is the state tables' size: IPv4 per-source keys plus
// every other key.
func (l *Limiter) SourcesCapacity() uint32 {
	return capacity4(l.objs.XdplSources4) + l.objs.XdplSources.MaxEntries()
}

// SourcesCapacities is each table's size: IPv4 per-source keys, and others.
func (l *Limiter) SourcesCapacities() (ipv4, other uint32) {
	return capacity4(l.objs.XdplSources4), l.objs.XdplSources.MaxEntries()
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
	l.table4Seed = meta.Table4Seed
	return l, nil
}

// checkPinnedLayout refuses pinned maps of another layout before anything
// tries to use them: a map whose value changed size between layouts (the
// sketch's, in layout 3) would otherwise fail to load with the kernel's
// words for it, which do not say what to do.
func checkPinnedLayout(pinned map[string]*ebpf.Map) error {
	if _, ok := pinned[gen.XdplimitMapXdplMeta]; !ok {
		return nil
	}
	v, err := PinnedLayout(pinned)
	if err != nil {
		return err
	}
	if v != 0 && v != LayoutVersion {
		return fmt.Errorf("pinned maps have layout version %d, this xdplimit reads %d: detach first", v, LayoutVersion)
	}
	return nil
}

// sizeFromPinned gives the spec the size of a pinned state table: an adopted
// or inspected table keeps the size it was attached with (--max-sources);
// resizing needs a detach. So do the tries (pinned by an earlier build).
func sizeFromPinned(spec *ebpf.CollectionSpec, pinned map[string]*ebpf.Map) {
	for _, name := range append([]string{Sources4Map, SourcesMap, LogsMap, sketchMap, dropSamplesMap, gen.XdplimitMapXdplTrafficSamples}, tries...) {
		if m, ok := pinned[name]; ok {
			spec.Maps[name].MaxEntries = m.MaxEntries()
		}
	}
	if m, ok := pinned[banMap]; ok {
		sizeBans(spec, m.MaxEntries())
	}
}
