// SPDX-License-Identifier: Apache-2.0

package maps

import (
	"fmt"

	"github.com/xdplimit/xdplimit/gen"
)

// UnusedLogs is the size of a sliding_log table that no level uses: the
// kernel wants at least one entry, and an LRU hash allocates every entry
// when it is created (a full table is ~37 MiB at the default
// --max-sources), so a policy without sliding_log levels gets this one.
const UnusedLogs = 1

// LogsFor is the size of the sliding_log table for img on state tables of
// maxSources IPv4 entries (0: the program's default): a sixteenth of them
// when some level is a sliding_log, else UnusedLogs.
func LogsFor(img *Image, maxSources uint32) uint32 {
	if !img.SlidingLogs() {
		return UnusedLogs
	}
	if maxSources == 0 {
		return 0 // the program's default, sized for its default table
	}
	return logsOf(maxSources)
}

// logsOf is the sliding_log table's size for state tables of maxSources
// IPv4 entries: one log for every 16 (a sliding_log level is for small
// exact limits, on few keys).
func logsOf(maxSources uint32) uint32 { return max(maxSources/16, 1) }

// LogsCapacity is the size of the loaded sliding_log table.
func (l *Limiter) LogsCapacity() uint32 { return l.objs.XdplLogs.MaxEntries() }

// checkLogs refuses an image with sliding_log levels on a limiter loaded
// without a table for their logs: its keys would share one log, and each
// would evict the others', so every key would restart its log at each
// packet and admit far over its limit.
func (l *Limiter) checkLogs(img *Image) error {
	if !img.SlidingLogs() || l.LogsCapacity() > UnusedLogs {
		return nil
	}
	return fmt.Errorf("the policy has sliding_log levels, and this limiter was attached without their table " +
		"(its policy then had none, so the memory was not allocated): restart the attach process " +
		"(it adopts the running limiter without a gap in enforcement and allocates the table), " +
		"then the policy applies")
}

// LogsCreated is the number of sliding_log logs the datapath has created
// since its maps were created (ids are handed out one by one and never
// reused).
func (l *Limiter) LogsCreated() (uint64, error) {
	var ids gen.XdplimitXdplLogIds
	if err := l.objs.XdplLogIds.Lookup(uint32(0), &ids); err != nil {
		return 0, fmt.Errorf("reading the sliding_log ids: %w", err)
	}
	return ids.Next, nil
}
