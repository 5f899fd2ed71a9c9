// SPDX-License-Identifier: Apache-2.0

package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var xdplimitBuild struct {
	once sync.Once
	path string
	err  error
}

// XdplimitBin is the xdplimit binary that end-to-end tests run:
// $XDPLIMIT_BIN (make test-go and the VM set it), or one built from this
// checkout once per test process.
func XdplimitBin(tb testing.TB) string {
	tb.Helper()
	if p := os.Getenv("XDPLIMIT_BIN"); p != "" {
		if _, err := os.Stat(p); err != nil {
			tb.Fatalf("XDPLIMIT_BIN: %v", err)
		}
		return p
	}
	b := &xdplimitBuild
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "xdplimit-bin-")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, "xdplimit")
		out, err := exec.Command("go", "build", "-o", b.path, "github.com/xdplimit/xdplimit/cmd/xdplimit").CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if b.err != nil {
		tb.Fatal(b.err)
	}
	return b.path
}

// Status is what end-to-end tests read of `xdplimit status -o json`: the
// parts they judge, decoded as a script would, not with the command's own
// types.
type Status struct {
	Interfaces []struct {
		Interface string `json:"interface"`
		Rules     []struct {
			Rule     string `json:"rule"`
			Verdicts map[string]struct {
				Packets uint64 `json:"packets"`
			} `json:"verdicts"`
			Reject *struct {
				Sent       uint64 `json:"sent"`
				Suppressed uint64 `json:"suppressed"`
			} `json:"reject"`
		} `json:"rules"`
		Counters map[string]struct {
			Packets uint64 `json:"packets"`
		} `json:"counters"`
		Conversations map[string]struct {
			When   string `json:"when"`
			Armed  bool   `json:"armed"`
			Shadow bool   `json:"shadow"`
		} `json:"conversations"`
	} `json:"interfaces"`
}
