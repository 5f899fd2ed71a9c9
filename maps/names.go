// SPDX-License-Identifier: Apache-2.0

package maps

import (
	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/gen"
)

// mapList is the one list of the limiter's maps: each map's name (its pin
// file) and where the loaded objects hold it. MapNames and Map derive from
// it; TestMapList checks it against the program's maps.
var mapList = []struct {
	name string
	of   func(*gen.XdplimitMaps) *ebpf.Map
}{
	{gen.XdplimitMapXdplAcl4, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplAcl4 }},
	{gen.XdplimitMapXdplAcl6, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplAcl6 }},
	{gen.XdplimitMapXdplClock, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplClock }},
	{gen.XdplimitMapXdplCounters, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplCounters }},
	{gen.XdplimitMapXdplCtl, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplCtl }},
	{gen.XdplimitMapXdplDport, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplDport }},
	{gen.XdplimitMapXdplDst4, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplDst4 }},
	{gen.XdplimitMapXdplDst6, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplDst6 }},
	{gen.XdplimitMapXdplMeta, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplMeta }},
	{gen.XdplimitMapXdplNames, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplNames }},
	{gen.XdplimitMapXdplProto, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplProto }},
	{gen.XdplimitMapXdplRules, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplRules }},
	{gen.XdplimitMapXdplSources, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplSources }},
	{gen.XdplimitMapXdplSport, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplSport }},
	{gen.XdplimitMapXdplSrc4, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplSrc4 }},
	{gen.XdplimitMapXdplSrc6, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplSrc6 }},
	{gen.XdplimitMapXdplStats, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplStats }},
	{gen.XdplimitMapXdplTcpf, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplTcpf }},
	{gen.XdplimitMapXdplVlan, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplVlan }},
	{gen.XdplimitMapXdplDrops, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplDrops }},
	{gen.XdplimitMapXdplDropSamples, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplDropSamples }},
	{gen.XdplimitMapXdplTraffic, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplTraffic }},
	{gen.XdplimitMapXdplTrafficSamples, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplTrafficSamples }},
	{gen.XdplimitMapXdplLast, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplLast }},
	{gen.XdplimitMapXdplSketchMap, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplSketchMap }},
	{gen.XdplimitMapXdplSources4, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplSources4 }},
	{gen.XdplimitMapXdplGlobals, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplGlobals }},
	{gen.XdplimitMapXdplFleetKeys, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplFleetKeys }},
	{gen.XdplimitMapXdplFleetCtl, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplFleetCtl }},
	{gen.XdplimitMapXdplFleetBatch, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplFleetBatch }},
	{gen.XdplimitMapXdplFleetReserve, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplFleetReserve }},
	{gen.XdplimitMapXdplFleetShares, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplFleetShares }},
	{gen.XdplimitMapXdplUnparsedCfgs, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplUnparsedCfgs }},
	{gen.XdplimitMapXdplUnparsedCounts, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplUnparsedCounts }},
	{gen.XdplimitMapXdplUnparsedState, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplUnparsedState }},
	{gen.XdplimitMapXdplIplen, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplIplen }},
	{gen.XdplimitMapXdplTtl, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplTtl }},
	{gen.XdplimitMapXdplTos, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplTos }},
	{gen.XdplimitMapXdplIcmpt, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplIcmpt }},
	{gen.XdplimitMapXdplIcmpc, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplIcmpc }},
	{gen.XdplimitMapXdplPayloadShapes, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplPayloadShapes }},
	{gen.XdplimitMapXdplPayload, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplPayload }},
	{gen.XdplimitMapXdplBan4, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplBan4 }},
	{gen.XdplimitMapXdplBan6, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplBan6 }},
	{gen.XdplimitMapXdplBans, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplBans }},
	{gen.XdplimitMapXdplLogs, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplLogs }},
	{gen.XdplimitMapXdplLogIds, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplLogIds }},
	{gen.XdplimitMapXdplRefused, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplRefused }},
	{gen.XdplimitMapXdplAcl4Hosts, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplAcl4Hosts }},
	{gen.XdplimitMapXdplAcl6Hosts, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplAcl6Hosts }},
	{gen.XdplimitMapXdplFlows, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplFlows }},
	{gen.XdplimitMapXdplCookiePass, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplCookiePass }},
	{gen.XdplimitMapXdplBanEpoch, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplBanEpoch }},
	{gen.XdplimitMapXdplScratch, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplScratch }},
	{gen.XdplimitMapXdplRejectBudget, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplRejectBudget }},
	{gen.XdplimitMapXdplRejectSources, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplRejectSources }},
	{gen.XdplimitMapXdplReplyScratch, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplReplyScratch }},
	{gen.XdplimitMapXdplLocal, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplLocal }},
	{gen.XdplimitMapXdplConvCtl, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplConvCtl }},
	{gen.XdplimitMapXdplConvWatch, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplConvWatch }},
	{gen.XdplimitMapXdplConvTicks, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplConvTicks }},
	{gen.XdplimitMapXdplReflectors, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplReflectors }},
	{gen.XdplimitMapXdplRequests, func(m *gen.XdplimitMaps) *ebpf.Map { return m.XdplRequests }},
}

// MapNames lists every map of the limiter, the unit of pinning.
var MapNames = func() []string {
	names := make([]string, len(mapList))
	for i, e := range mapList {
		names[i] = e.name
	}
	return names
}()

// The state tables: per-source IPv4 keys, and every other key.
const (
	Sources4Map = gen.XdplimitMapXdplSources4
	SourcesMap  = gen.XdplimitMapXdplSources
	// LogsMap holds the logs of sliding_log keys (their state entries
	// hold the ids).
	LogsMap = gen.XdplimitMapXdplLogs
)

// mapsByName is every map of the limiter, by name.
func (l *Limiter) mapsByName() map[string]*ebpf.Map {
	m := make(map[string]*ebpf.Map, len(mapList))
	for _, e := range mapList {
		m[e.name] = e.of(&l.objs.XdplimitMaps)
	}
	return m
}

// Maps is every map of the limiter, by name: Options.Pinned for another
// program on the same maps (a benchmark's cut copy of this one).
func (l *Limiter) Maps() map[string]*ebpf.Map { return l.mapsByName() }

// Map returns one map by name (for pinning and adoption); nil for a name
// that is not the limiter's.
func (l *Limiter) Map(name string) *ebpf.Map {
	for _, e := range mapList {
		if e.name == name {
			return e.of(&l.objs.XdplimitMaps)
		}
	}
	return nil
}
