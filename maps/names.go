package maps

import (
	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/gen"
)

// MapNames lists every map of the limiter, the unit of pinning.
var MapNames = []string{
	gen.XdplimitMapXdplAcl4, gen.XdplimitMapXdplAcl6, gen.XdplimitMapXdplClock,
	gen.XdplimitMapXdplCounters, gen.XdplimitMapXdplCtl, gen.XdplimitMapXdplDport,
	gen.XdplimitMapXdplDst4, gen.XdplimitMapXdplDst6, gen.XdplimitMapXdplMeta,
	gen.XdplimitMapXdplNames, gen.XdplimitMapXdplProto, gen.XdplimitMapXdplRules,
	gen.XdplimitMapXdplSources, gen.XdplimitMapXdplSport, gen.XdplimitMapXdplSrc4,
	gen.XdplimitMapXdplSrc6, gen.XdplimitMapXdplStats, gen.XdplimitMapXdplTcpf,
	gen.XdplimitMapXdplVlan, gen.XdplimitMapXdplDrops, gen.XdplimitMapXdplLast,
	gen.XdplimitMapXdplSketchMap, gen.XdplimitMapXdplSources4, gen.XdplimitMapXdplGlobals,
}

// The state tables: per-source IPv4 keys, and every other key.
const (
	Sources4Map = gen.XdplimitMapXdplSources4
	SourcesMap  = gen.XdplimitMapXdplSources
)

// Map returns one map by name (for pinning and adoption).
func (l *Limiter) Map(name string) *ebpf.Map {
	m := l.objs.XdplimitMaps
	return map[string]*ebpf.Map{
		gen.XdplimitMapXdplAcl4: m.XdplAcl4, gen.XdplimitMapXdplAcl6: m.XdplAcl6,
		gen.XdplimitMapXdplClock: m.XdplClock, gen.XdplimitMapXdplCounters: m.XdplCounters,
		gen.XdplimitMapXdplCtl: m.XdplCtl, gen.XdplimitMapXdplDport: m.XdplDport,
		gen.XdplimitMapXdplDst4: m.XdplDst4, gen.XdplimitMapXdplDst6: m.XdplDst6,
		gen.XdplimitMapXdplMeta: m.XdplMeta, gen.XdplimitMapXdplNames: m.XdplNames,
		gen.XdplimitMapXdplProto: m.XdplProto, gen.XdplimitMapXdplRules: m.XdplRules,
		gen.XdplimitMapXdplSources: m.XdplSources, gen.XdplimitMapXdplSport: m.XdplSport,
		gen.XdplimitMapXdplSrc4: m.XdplSrc4, gen.XdplimitMapXdplSrc6: m.XdplSrc6,
		gen.XdplimitMapXdplStats: m.XdplStats, gen.XdplimitMapXdplTcpf: m.XdplTcpf,
		gen.XdplimitMapXdplVlan: m.XdplVlan, gen.XdplimitMapXdplDrops: m.XdplDrops,
		gen.XdplimitMapXdplLast: m.XdplLast, gen.XdplimitMapXdplSketchMap: m.XdplSketchMap,
		gen.XdplimitMapXdplSources4: m.XdplSources4, gen.XdplimitMapXdplGlobals: m.XdplGlobals,
	}[name]
}
