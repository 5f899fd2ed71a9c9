// SPDX-License-Identifier: Apache-2.0

package main

import (
	"strings"
)

// fleetPairs pairs each fleet case with the same level at host scope. With
// the refused-until cache on, a drop case is answered by the cache after
// its first refusal, at either scope, and its pair measures the cache
// (cacheOnly): the level's state is read only by the pass cases and by the
// drop cases with the cache off, the pairs the fleet cost target is
// judged on.
var fleetPairs = []struct {
	fleet, host string
	cacheOnly   bool
}{
	{mFleetTBDrop, mTBDrop, true}, {mFleetTBPass, mTBPass, false}, {mFleetTBShare, mTBPass, false},
	{mFleetFWDrop, mFWDrop, true}, {mFleetFWPass, mFWPass, false},
	{mFleetTBDropOff, mTBDropOff, false}, {mFleetFWDropOff, mFWDropOff, false},
}

// fleetScoped is oneRule with the limit at scope: fleet. Loading needs no
// Redis: only the sync engine talks to it, and none runs here.
func fleetScoped(limit string) string {
	return "fleet: {redis: redis://127.0.0.1:6379/0}\n" + oneRule(strings.TrimSuffix(limit, "}")+", scope: fleet}")
}

// fleetPair is a level at host scope and the same level at fleet scope,
// measured call after call: at the 10% the target asks for, the noise of
// this shared machine between calls a second apart (the interleaved rounds
// of the micro table, ±20% seen) hides the difference; between adjacent
// calls much less of it does.
type fleetPair struct {
	host, fleet *microCase
	cacheOnly   bool   // the refused-until cache answers both: not judged
	ratio       sample // fleet ns / host ns, per adjacent pair of calls
}

// measureFleetPairs alternates the calls of each host/fleet pair, rounds
// times, on the caller's pinned thread.
func (r *microResults) measureFleetPairs(e *env, rounds int) error {
	for _, pr := range fleetPairs {
		p := &fleetPair{fleet: r.find(pr.fleet), host: r.find(pr.host), cacheOnly: pr.cacheOnly}
		if p.fleet == nil || p.host == nil || p.fleet.err != nil || p.host.err != nil {
			continue
		}
		r.FleetPairs = append(r.FleetPairs, p)
	}
	return pairRounds(e, "fleet/host pairs", rounds, func(i int) error {
		for _, p := range r.FleetPairs {
			a, b, err := adjacentCalls(p.host, p.fleet, i, r.Repeat)
			if err != nil {
				return err
			}
			p.ratio = append(p.ratio, b/a)
		}
		return nil
	})
}
