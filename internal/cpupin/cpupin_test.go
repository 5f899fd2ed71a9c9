// SPDX-License-Identifier: Apache-2.0

package cpupin_test

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/internal/cpupin"
)

func affinity(t *testing.T) unix.CPUSet {
	t.Helper()
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	return set
}

// lockedFirstCPU locks the test to its thread until the test ends and
// returns the thread's affinity and the first CPU in it.
func lockedFirstCPU(t *testing.T) (unix.CPUSet, int) {
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	cpu, err := cpupin.FirstCPU()
	if err != nil {
		t.Fatal(err)
	}
	return affinity(t), cpu
}

// TestOnCPU runs a function pinned to the first allowed CPU and checks that
// the caller's affinity is untouched.
func TestOnCPU(t *testing.T) {
	before, cpu := lockedFirstCPU(t)
	var inside unix.CPUSet
	if err := cpupin.OnCPU(cpu, func() error { return unix.SchedGetaffinity(0, &inside) }); err != nil {
		t.Fatal(err)
	}
	if inside.Count() != 1 || !inside.IsSet(cpu) {
		t.Errorf("fn ran with affinity %v, want only CPU %d", inside, cpu)
	}
	if after := affinity(t); after != before {
		t.Errorf("caller's affinity changed from %v to %v", before, after)
	}
}

// TestPinUnpin pins the test's own thread and restores it.
func TestPinUnpin(t *testing.T) {
	before, cpu := lockedFirstCPU(t)
	unpin, err := cpupin.Pin(cpu)
	if err != nil {
		t.Fatal(err)
	}
	if got := affinity(t); got.Count() != 1 || !got.IsSet(cpu) {
		t.Errorf("pinned affinity %v, want only CPU %d", got, cpu)
	}
	unpin()
	if after := affinity(t); after != before {
		t.Errorf("unpin left affinity %v, want %v", after, before)
	}
}
