// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/internal/cpupin"
)

// slopeTimer times the per-packet cost of a program below a nanosecond.
//
// BPF_PROG_TEST_RUN reports floor(total/runs) in whole ns: on a 5 ns bare
// program that makes every "× bare" ratio good to ±20%. The thread's CPU
// time (CLOCK_THREAD_CPUTIME_ID) around a call has ns resolution over the
// whole call, milliseconds long, and like the kernel's timer it stops while
// the thread is off its CPU, so other load on the machine inflates it
// little. It also holds each call's fixed part (entering the test run,
// setting up its context: ~0.3 ms of CPU here, varying by ~50 µs), so one
// call's time over its runs is biased by that part's share. Two calls of
// different counts, n1 and n2, cancel it: (t2 − t1) / (n2 − n1). With
// n2 − n1 = 3/4 of 2^20 runs the fixed part's variation moves the slope by
// under 0.1 ns. Wall-clock time would serve the slope too, but counts the
// time the thread was preempted. Both calls run on the caller's thread,
// which must be locked to it (the micro benchmark pins it).
type slopeTimer struct {
	n [2]int
	t [2]time.Duration
	k int
}

// counts are the two calls' runs for a case measured at repeat runs.
func (s *slopeTimer) counts(repeat int) [2]int {
	return [2]int{max(repeat/4, 1), max(repeat, 2)}
}

// call makes one call of n runs and records its CPU time.
func (s *slopeTimer) call(prog *ebpf.Program, frame []byte, n int) (uint32, error) {
	if s.k == len(s.n) {
		return 0, fmt.Errorf("slopeTimer: more than %d calls", len(s.n))
	}
	before := cpupin.ThreadCPU()
	ret, _, err := prog.Benchmark(frame, n, nil)
	s.n[s.k], s.t[s.k] = n, cpupin.ThreadCPU()-before
	s.k++
	return ret, err
}

// perPacket is the slope in ns per run.
func (s *slopeTimer) perPacket() (float64, error) {
	if s.k != len(s.n) || s.n[1] <= s.n[0] {
		return 0, fmt.Errorf("slopeTimer: calls of %v runs, want two of increasing counts", s.n[:s.k])
	}
	d := float64(s.t[1] - s.t[0])
	if d <= 0 {
		return 0, fmt.Errorf("slopeTimer: %v runs took %v of CPU, %v runs %v: no cost per run measured",
			s.n[0], s.t[0], s.n[1], s.t[1])
	}
	return d / float64(s.n[1]-s.n[0]), nil
}
