// Package slidelog is an exact sliding-window rate limiter: it remembers
// the time of every packet it admitted in the last window. It is the
// reference the benchmark measures the datapath's sliding window against,
// which keeps two counters per key and weights the previous window's count
// by how much of it still overlaps the sliding window (an estimate that
// assumes the previous window's packets were spread evenly).
package slidelog

// Log holds the times (ns) of admitted packets over the last window. Like
// the datapath, it counts admitted packets only: a refused packet does not
// use up the limit.
type Log struct {
	window uint64
	limit  int
	ts     []uint64 // admitted times, oldest first, from head
	head   int
}

// New returns an empty log for limit packets per window ns.
func New(window uint64, limit int) *Log {
	return &Log{window: window, limit: limit, ts: make([]uint64, 0, 2*limit)}
}

// Reset forgets every packet, for reuse on another key.
func (l *Log) Reset() { l.ts, l.head = l.ts[:0], 0 }

// expire drops the times outside (now-window, now].
func (l *Log) expire(now uint64) {
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
func (l *Log) Count(now uint64) int {
	l.expire(now)
	return len(l.ts) - l.head
}

// Allows says whether an exact sliding window would admit a packet at now.
func (l *Log) Allows(now uint64) bool { return l.Count(now) < l.limit }

// Add records a packet admitted at now, whoever decided it.
func (l *Log) Add(now uint64) { l.ts = append(l.ts, now) }

// Admit decides a packet at now as an exact sliding window and records it
// when admitted.
func (l *Log) Admit(now uint64) bool {
	if !l.Allows(now) {
		return false
	}
	l.Add(now)
	return true
}
