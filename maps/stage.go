// SPDX-License-Identifier: Apache-2.0

package maps

import "github.com/xdplimit/xdplimit/gen"

// Stage is one of the datapath's stages, in the order a packet meets them
// (bpf/xdplimit.bpf.c, xdpl_main), for Options.BenchStop.
type Stage uint32

// The stages, each including those before it.
const (
	StopParse       = Stage(gen.XdplimitXdplConstXDPL_STOP_PARSE)        // parsed
	StopFlows       = Stage(gen.XdplimitXdplConstXDPL_STOP_FLOWS)        // the generation read, the first flow cache lookups
	StopLists       = Stage(gen.XdplimitXdplConstXDPL_STOP_LISTS)        // allow/deny lists, bans
	StopCookieACKs  = Stage(gen.XdplimitXdplConstXDPL_STOP_COOKIE_ACKS)  // ACKs checked against SYN cookies
	StopGlobalFlows = Stage(gen.XdplimitXdplConstXDPL_STOP_GLOBAL_FLOWS) // the flow cache keyed without the source, after the lists
	StopRule        = Stage(gen.XdplimitXdplConstXDPL_STOP_RULE)         // the rule's classification and levels
)

// Stages are the stages in order.
var Stages = []Stage{StopParse, StopFlows, StopLists, StopCookieACKs, StopGlobalFlows, StopRule}

func (s Stage) String() string {
	switch s {
	case StopParse:
		return "parse"
	case StopFlows:
		return "flow cache (without the source first where nothing before the rule reads it, then with it)"
	case StopLists:
		return "allow/deny lists and bans"
	case StopCookieACKs:
		return "ACKs against SYN cookies"
	case StopGlobalFlows:
		return "flow cache (without the source, after lists, bans or cookie checks)"
	case StopRule:
		return "rule: classification and levels"
	}
	return "every stage and the accounting"
}

// Floor is one of the floor programs of the stage benchmark's build
// (bpf/floor.h), for Options.BenchFloor: after the parser, only what any
// limiter must do for the verdict.
type Floor uint32

const (
	FloorRefused  = Floor(gen.XdplimitXdplConstXDPL_FLOOR_REFUSED)  // a known source refused
	FloorGlobal   = Floor(gen.XdplimitXdplConstXDPL_FLOOR_GLOBAL)   // a global level refusing, whatever the source
	FloorAdmitted = Floor(gen.XdplimitXdplConstXDPL_FLOOR_ADMITTED) // a known source admitted
	FloorInserted = Floor(gen.XdplimitXdplConstXDPL_FLOOR_INSERTED) // a new source into a full state table
	// FloorUntracked: a new source counted in the admission sketch.
	FloorUntracked = Floor(gen.XdplimitXdplConstXDPL_FLOOR_UNTRACKED)
	// FloorAdmittedFW and FloorAdmittedSW: a known source admitted by a
	// fixed and a sliding window.
	FloorAdmittedFW = Floor(gen.XdplimitXdplConstXDPL_FLOOR_ADMITTED_FW)
	FloorAdmittedSW = Floor(gen.XdplimitXdplConstXDPL_FLOOR_ADMITTED_SW)
)

// Floors are the floor programs.
var Floors = []Floor{FloorRefused, FloorGlobal, FloorAdmitted, FloorInserted, FloorUntracked,
	FloorAdmittedFW, FloorAdmittedSW}

func (f Floor) String() string {
	switch f {
	case FloorRefused:
		return "a known source refused: one keyed per-CPU slot, the clock, the drop counted"
	case FloorGlobal:
		return "a global level refusing: its array slot, the clock, the drop counted"
	case FloorAdmitted:
		return "a known source admitted: the shared state table, the clock, one compare-and-swap, the pass counted"
	case FloorInserted:
		return "a new source into a full state table: its entry inserted, the least recently used evicted, the pass counted"
	case FloorUntracked:
		return "a new source left without an entry: one random line of the CPU's sketch region read and written, the pass counted"
	case FloorAdmittedFW:
		return "a known source admitted by a fixed window: the shared state table, the clock against the window's end, one compare-and-swap, the pass counted"
	case FloorAdmittedSW:
		return "a known source admitted by a sliding window: the shared state table, the window's index by one division, the previous window's share by multiplying, one compare-and-swap, the pass counted"
	}
	return "no floor"
}
