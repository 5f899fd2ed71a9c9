// SPDX-License-Identifier: Apache-2.0

package maps

import "github.com/xdplimit/xdplimit/gen"

// BytesOf is bytesOf for the external tests: a slice of n zeroed values of
// size bytes, the shape the batch calls take.
var BytesOf = bytesOf

// LoadedWithoutConntrack makes l behave as a limiter whose program was
// loaded where conntrack lookups were not available, for why, until the
// returned function restores it (the tests' limiters are pooled).
func LoadedWithoutConntrack(l *Limiter, why error) (restore func()) {
	was, known := l.conntrackErr, l.conntrackKnown
	l.conntrackErr, l.conntrackKnown = why, true
	return func() { l.conntrackErr, l.conntrackKnown = was, known }
}

// Set4Of is the set of the IPv4 state table that holds a level's key of
// the IPv4 source addr (in the packet's byte order), as the datapath finds
// it.
func (l *Limiter) Set4Of(stateID, addr uint32) uint32 {
	return l.set4(key4Word(stateID, addr))
}

// Table4Seed is the seed l's program hashes the IPv4 table's keys with.
func (l *Limiter) Table4Seed() uint64 { return l.table4Seed }

// LookupIPv4State is lookup4: the state of a level's key of an IPv4 source.
var LookupIPv4State = (*Limiter).lookup4

// SketchCount is the sum of the admission sketch's cells as numbers: what
// the untracked floor's increments add up to on a sketch that held nothing
// else.
func (l *Limiter) SketchCount() (uint64, error) {
	var k uint32
	var line [gen.XdplimitXdplConstXDPL_SKETCH_LINE_CELLS]uint32
	var sum uint64
	it := l.objs.XdplSketchMap.Iterate()
	for it.Next(&k, &line) {
		for _, c := range line {
			sum += uint64(c)
		}
	}
	return sum, it.Err()
}
