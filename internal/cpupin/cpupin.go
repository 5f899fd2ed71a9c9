// SPDX-License-Identifier: Apache-2.0

// Package cpupin runs code on an OS thread of its own, pinned to a CPU or
// not: BPF_PROG_TEST_RUN ignores RunOptions.CPU for XDP, and the datapath's
// per-CPU state (the admission sketch, the flow and refused caches) makes a
// run's verdicts depend on the CPU it lands on. Production uses it (replay
// pins `policy test --pcap` to one CPU so a replay is reproducible; the
// traffic generator pins its workers), and so do the benchmark program and
// the tests. internal/netns enters namespaces on Locked threads too.
//
// Affinity belongs to OS threads, not goroutines: every function here that
// changes it runs on a thread that is never handed back to the Go scheduler
// unrestored, so no other goroutine inherits the change. It imports no other
// xdplimit package and not package testing.
package cpupin

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// Locked runs fn on a fresh goroutine locked to its OS thread and waits for
// it. The thread is never unlocked: it exits with the goroutine, so fn may
// change per-thread state (network namespace, CPU affinity) without that
// state leaking to other goroutines. This costs a thread per call, which is
// cheap next to the netlink and BPF work done in one.
//
// A panic in fn is re-raised in the caller, and runtime.Goexit in fn (a
// t.Fatal) ends the caller's goroutine too, as if fn had run there.
func Locked(fn func() error) error {
	type result struct {
		err    error
		panic  any
		goexit bool
	}
	done := make(chan result, 1)
	go func() {
		returned := false
		defer func() {
			if !returned {
				// recover returns nil under runtime.Goexit.
				if p := recover(); p != nil {
					done <- result{panic: p}
				} else {
					done <- result{goexit: true}
				}
			}
		}()
		runtime.LockOSThread()
		err := fn()
		returned = true
		done <- result{err: err}
	}()
	r := <-done
	switch {
	case r.panic != nil:
		panic(r.panic)
	case r.goexit:
		runtime.Goexit()
	}
	return r.err
}

// Pin locks the calling goroutine to its OS thread and the thread to cpu:
// BPF_PROG_TEST_RUN ignores RunOptions.CPU for XDP, so a run lands on a
// chosen CPU only this way. unpin restores the thread's former affinity
// and unlocks it; without unpin, if restoring fails, or if Pin fails after
// locking, the thread stays locked and exits with the goroutine, taking the
// affinity with it.
func Pin(cpu int) (unpin func(), err error) {
	if cpu < 0 {
		return nil, fmt.Errorf("pin to CPU %d: no such CPU", cpu)
	}
	runtime.LockOSThread()
	var old, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return nil, fmt.Errorf("read CPU affinity: %w", err)
	}
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("pin to CPU %d: %w", cpu, err)
	}
	return func() {
		if unix.SchedSetaffinity(0, &old) == nil {
			runtime.UnlockOSThread()
		}
	}, nil
}

// OnCPU runs fn with Locked on a thread pinned to cpu.
func OnCPU(cpu int, fn func() error) error {
	return Locked(func() error {
		if _, err := Pin(cpu); err != nil {
			return err
		}
		return fn()
	})
}

// FirstCPU is the lowest-numbered CPU the calling thread may run on: a
// CPU to pin to that a restricted affinity mask (taskset, cgroups) allows.
func FirstCPU() (int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return 0, fmt.Errorf("read CPU affinity: %w", err)
	}
	for cpu := 0; cpu < len(set)*64; cpu++ {
		if set.IsSet(cpu) {
			return cpu, nil
		}
	}
	return 0, errors.New("no CPU in this thread's affinity mask")
}

// ThreadCPU is the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID): it
// stops while the thread is off its CPU, so other load on the machine
// inflates a measurement little. The caller stays locked to its thread
// between two readings.
func ThreadCPU() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return time.Duration(ts.Nano())
}
