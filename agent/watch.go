package agent

import (
	"log/slog"

	"github.com/xdplimit/xdplimit/internal/watch"
	"github.com/xdplimit/xdplimit/policy"
)

// watchPolicy reports changes to the policy file and to the allow/deny list
// files it names. Watching is a convenience on top of SIGHUP, so a failure
// to watch (inotify limits) is a warning and the channel then never fires.
func watchPolicy(path string, log *slog.Logger) (changes <-chan struct{}, stop func()) {
	w, err := watch.New(path, watch.Options{
		// The list files of the policy as it is on disk now, even when it
		// does not load: a file it newly names is then watched for.
		Related: policy.NamedListFiles,
		Log:     log.With("watch", path),
	})
	if err != nil {
		log.Warn("not watching the policy file; reload with SIGHUP or `xdplimit reload`", "err", err)
		return nil, func() {}
	}
	return w.Changes(), func() { w.Close() }
}
