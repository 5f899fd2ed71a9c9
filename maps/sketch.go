// SPDX-License-Identifier: Apache-2.0

package maps

import (
	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/gen"
)

// The admission sketch's size (bpf/sketch.h): set at load from the
// machine's CPUs.

// sketchBudget bounds the admission sketch's memory (an array of 8-byte
// elements, XDPL_SKETCH_ROWS rows per CPU).
const sketchBudget = 32 << 20

// sketchWidth is the cells per row per CPU: as wide as the budget allows on
// this machine, up to XDPL_SKETCH_MAX_WIDTH. A wide sketch keeps count-min
// collisions rare even when a spoofed flood brings ~5M new keys a second to
// one CPU (~80k per 16.8 ms epoch): 0.3-0.9% of them tracked early with four
// rows of 256k cells, 3-5% with two (docs/design.md).
func sketchWidth(cpus int) uint32 {
	w := uint32(gen.XdplimitXdplConstXDPL_SKETCH_MAX_WIDTH)
	rows := uint32(gen.XdplimitXdplConstXDPL_SKETCH_ROWS)
	for w > 2048 && uint64(w)*uint64(rows)*8*uint64(cpus) > sketchBudget {
		w /= 2
	}
	return w
}

func sketchCells() uint32 {
	cpus := ebpf.MustPossibleCPU()
	return uint32(cpus) * uint32(gen.XdplimitXdplConstXDPL_SKETCH_ROWS) * sketchWidth(cpus)
}

// DefaultTrackAfter is the sketch threshold: a source's second packet
// within a second creates its state entry.
const DefaultTrackAfter = 2
