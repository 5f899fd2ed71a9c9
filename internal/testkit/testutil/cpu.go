// SPDX-License-Identifier: Apache-2.0

package testutil

import (
	"testing"

	"github.com/xdplimit/xdplimit/internal/cpupin"
)

// PinCPU keeps the test's goroutine on its OS thread and that thread on cpu
// until the test ends: the datapath's caches and admission sketch are per
// CPU, so a test that reads them back must run every packet on one. Call it
// from the test's own goroutine (a subtest has its own).
func PinCPU(tb testing.TB, cpu int) {
	tb.Helper()
	unpin, err := cpupin.Pin(cpu)
	if err != nil {
		tb.Fatal(err)
	}
	// Cleanups run on the test's goroutine, still on the pinned thread.
	tb.Cleanup(unpin)
}
