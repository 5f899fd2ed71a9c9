// SPDX-License-Identifier: Apache-2.0

package maps

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
