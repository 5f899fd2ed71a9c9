// SPDX-License-Identifier: Apache-2.0

package model

// ExactLog is an exact sliding-window rate limiter: it remembers the time of
// every packet it admitted in the last window, with no bound on how many.
// Unlike the models beside it, it mirrors no datapath code: it is the
// reference the others are judged by. The benchmark measures the datapath's
// sliding window against it (two counters per key, the previous window's
// count weighted by how much of it still overlaps the sliding window, an
// estimate that assumes its packets were spread evenly), and the maps tests
// check that sliding_log, bounded at LogMax packets, decides as it does.
//
// ExactLog holds the times (ns) of admitted packets over the last window.
// Like the datapath, it counts admitted packets only: a refused packet does
// not use up the limit.
type ExactLog struct {
	window uint64
	limit  int
	ts     []uint64 // admitted times, oldest first, from head
	head   int
}

// NewExactLog returns an empty log for limit packets per window ns.
func NewExactLog(window uint64, limit int) *ExactLog {
	return &ExactLog{window: window, limit: limit, ts: make([]uint64, 0, 2*limit)}
}

// Reset forgets every packet, for reuse on another key.
func (l *ExactLog) Reset() { l.ts, l.head = l.ts[:0], 0 }

// expire drops the times outside (now-window, now].
func (l *ExactLog) expire(now uint64) {
	for l.head < len(l.ts) && l.ts[l.head]+l.window <= now {
		l.head++
	}
	// Compact once the dead prefix is as long as what is left, so that
	// the slice stays within twice the window's count.
	if l.head > 0 && l.head >= len(l.ts)-l.head {
		n := copy(l.ts, l.ts[l.head:])
		l.ts, l.head = l.ts[:n], 0
	}
}

// Count is the number of packets admitted in (now-window, now]; times must
// not decrease from call to call.
func (l *ExactLog) Count(now uint64) int {
	l.expire(now)
	return len(l.ts) - l.head
}

// Allows says whether an exact sliding window would admit a packet at now.
func (l *ExactLog) Allows(now uint64) bool { return l.Count(now) < l.limit }

// Add records a packet admitted at now, whoever decided it.
func (l *ExactLog) Add(now uint64) { l.ts = append(l.ts, now) }

// Admit decides a packet at now as an exact sliding window and records it
// when admitted.
func (l *ExactLog) Admit(now uint64) bool {
	if !l.Allows(now) {
		return false
	}
	l.Add(now)
	return true
}
