// SPDX-License-Identifier: Apache-2.0

package agent

// The fleet status file: a running agent's fleet sync state, for
// `xdplimit status`, which runs in another process. It lives here, with the
// runner that writes it, rather than in package fleet: it is the agent's
// run-time file (beside the interface's lock file, removed when the sync
// stops or the limiter is detached), while package fleet is the sync alone
// and also runs where no file belongs (simulations, benchmarks).

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/xdplimit/xdplimit/fleet"
	"github.com/xdplimit/xdplimit/loader"
)

// FleetStatusPath is where a running agent leaves its fleet sync state for
// `xdplimit status`, beside the interface's lock file.
func FleetStatusPath(iface string) string {
	return filepath.Join(loader.RunDir(), iface+".fleet.json")
}

// ReadFleetStatus reads what the agent of iface last wrote: it rewrites the
// file every second while its fleet sync runs, and removes it when the sync
// stops. The file may be stale when the agent was killed: check that the
// owner recorded in the pinned metadata runs (loader.OwnerAlive).
func ReadFleetStatus(iface string) (fleet.Status, error) {
	var s fleet.Status
	data, err := os.ReadFile(FleetStatusPath(iface))
	if err != nil {
		return s, err
	}
	return s, json.Unmarshal(data, &s)
}

// writeFleetStatus rewrites the status file every second until ctx ends.
// Each write goes to a temporary file renamed over the old one, so a reader
// never sees half a file.
func writeFleetStatus(ctx context.Context, iface string, e *fleet.Engine, log *slog.Logger) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	warned := false
	for {
		data, _ := json.Marshal(e.Status())
		path := FleetStatusPath(iface)
		tmp := path + ".tmp"
		err := os.MkdirAll(filepath.Dir(path), 0o700)
		if err == nil {
			err = os.WriteFile(tmp, data, 0o644)
		}
		if err == nil {
			err = os.Rename(tmp, path)
		}
		if err != nil && !warned {
			log.Warn("cannot write the fleet status file", "path", path, "err", err)
			warned = true
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// removeFleetStatus removes the status file of iface, if any.
func removeFleetStatus(iface string) {
	os.Remove(FleetStatusPath(iface))
}
