// SPDX-License-Identifier: Apache-2.0

package maps

import (
	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/gen"
)

// The admission sketch's size (bpf/sketch.h): set at load from the
// machine's CPUs.

// sketchBudget bounds the admission sketch's memory (4-byte cells,
// XDPL_SKETCH_ROWS rows per CPU).
const sketchBudget = 32 << 20

// sketchWidth is the cells per row per CPU: as wide as the budget allows on
// this machine, up to XDPL_SKETCH_MAX_WIDTH (8 MiB per CPU). A wide sketch
// keeps count-min collisions rare even when a spoofed flood brings ~5M new
// keys a second to one CPU (~80k per 16.8 ms epoch; docs/design.md,
// docs/internals/state-tables.md).
func sketchWidth(cpus int) uint32 {
	w := uint32(gen.XdplimitXdplConstXDPL_SKETCH_MAX_WIDTH)
	rows := uint32(gen.XdplimitXdplConstXDPL_SKETCH_ROWS)
	for w > 2048 && uint64(w)*uint64(rows)*4*uint64(cpus) > sketchBudget {
		w /= 2
	}
	return w
}

// sketchLines is the sketch map's size: its elements are cache lines of
// XDPL_SKETCH_LINE_CELLS cells.
func sketchLines() uint32 {
	cpus := ebpf.MustPossibleCPU()
	return uint32(cpus) * uint32(gen.XdplimitXdplConstXDPL_SKETCH_ROWS) * sketchWidth(cpus) /
		uint32(gen.XdplimitXdplConstXDPL_SKETCH_LINE_CELLS)
}

// sketchWidthOf is the width of a sketch map of lines entries.
func sketchWidthOf(lines uint32) uint32 {
	return lines * uint32(gen.XdplimitXdplConstXDPL_SKETCH_LINE_CELLS) /
		uint32(ebpf.MustPossibleCPU()) / uint32(gen.XdplimitXdplConstXDPL_SKETCH_ROWS)
}

// DefaultTrackAfter is the sketch threshold: a source's second packet
// within a second creates its state entry.
const DefaultTrackAfter = 2

// MaxTrackAfter is the largest threshold: a sketch cell counts to 255.
const MaxTrackAfter = 255
