// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"log/slog"
	"time"

	"github.com/xdplimit/xdplimit/internal/watch"
	"github.com/xdplimit/xdplimit/policy"
)

// watchSettle is how long the policy's files must stay the same before a
// change is applied: a file an editor or a tool writes in place, in
// several writes, is then read whole.
const watchSettle = 500 * time.Millisecond

// watchPolicy reports changes to the policy file and to the allow/deny list
// files it names, once they have settled. Watching is a convenience on top
// of `xdplimit reload`, so a failure to watch (inotify limits) is a warning
// and the channel then never fires.
func watchPolicy(path string, log *slog.Logger) (changes <-chan struct{}, stop func()) {
	w, err := watch.New(path, watch.Options{
		Settle: watchSettle,
		// The list files of the policy as it is on disk now, even when it
		// does not load: a file it newly names is then watched for.
		Related: policy.NamedListFiles,
		Log:     log.With("watch", path),
	})
	if err != nil {
		log.Warn("not watching the policy file; reload with `xdplimit reload` or SIGHUP", "err", err)
		return nil, func() {}
	}
	return w.Changes(), func() { w.Close() }
}
