// SPDX-License-Identifier: Apache-2.0

package model

import (
	"fmt"
	"time"
)

// LogMax is the most admission times a sliding log holds: the largest
// sliding_log limit (XDPL_LOG_MAX).
const LogMax = 64

// LogBytes is what one sliding_log key costs in its log table, in kernel
// memory: the 8-byte id key, the 520-byte log (a sequence word and LogMax
// times) and the LRU hash's per-entry overhead (as measured for the state
// tables' entries), rounded to 8 bytes. It is on top of the key's 88- or
// 104-byte state entry, which holds the log's id.
const LogBytes = 8 + 8 + 8*LogMax + 64

// SlidingLogParams gives the parameters of a sliding log: at most limit
// packets (1..LogMax) in any window-long interval.
func SlidingLogParams(limit uint64, window time.Duration) (Params, error) {
	if limit == 0 || limit > LogMax {
		return Params{}, fmt.Errorf("sliding_log limit %d outside 1..%d packets", limit, LogMax)
	}
	if window <= 0 || window > 1<<46 {
		return Params{}, fmt.Errorf("window %v outside what the datapath holds", window)
	}
	return Params{Algorithm: AlgSlidingLog, P1: uint64(window), P2: limit}, nil
}

// Log is one key's sliding log (struct xdpl_log): Seq is the admissions
// so far shifted left by one (the low bit is the datapath's lock, never
// set in the model), and admission k's time is in T[k % limit].
type Log struct {
	Seq uint64
	T   [LogMax]uint64
}

// allows mirrors xdpl_log_allows: whether a packet at now may be logged
// after h admissions, and the time it would be logged at (never before
// the newest logged time).
func (g *Log) allows(h, n, w, now uint64) (bool, uint64) {
	var newest uint64
	if h > 0 {
		newest = g.T[(h-1)%n]
	}
	at := max(newest, now)
	if h < n {
		return true, at
	}
	return int64(at-g.T[h%n]) >= int64(w), at
}

// admit mirrors xdpl_sliding_log with the lock always free.
func (g *Log) admit(p Params, now, cost uint64) bool {
	w, n := p.P1, p.P2
	if cost != 1 || n == 0 || n > LogMax {
		return false
	}
	h := g.Seq >> 1
	ok, at := g.allows(h, n, w, now)
	if !ok {
		return false
	}
	g.T[h%n] = at
	g.Seq += 2
	return true
}

func (s *State) slidingLog(p Params, now, cost uint64) bool {
	return s.Log.admit(p, now, cost)
}
