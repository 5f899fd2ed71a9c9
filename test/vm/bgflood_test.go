// SPDX-License-Identifier: Apache-2.0

package vm

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/pktgen"
)

// Floods beside a test: started in the background from a lab's sending
// end, stopped when the test has measured what it ran beside them.

// waitFor polls cond every 20 ms until it holds, for at most d: for
// events (a flood arriving) whose timing the test does not judge.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v", what, d)
		}
	}
}

// secondCPU is where a second generator runs beside one on CPU 0: CPU 1,
// or CPU 0 too on a machine with one (a VM run with --smp 1), where the
// two then share it as the scheduler decides.
func secondCPU() int { return min(1, runtime.NumCPU()-1) }

// bgFlood is a flood running beside the test until stopped.
type bgFlood struct {
	cancel context.CancelFunc
	done   chan struct{}
	res    pktgen.Result
	err    error
}

// startFlood starts sending count copies of frame from the given sources,
// from CPU 0; the test's cleanup stops it if the test ends first. The
// listener's work on the flood runs in the generator's softirq (the veth's
// NAPI runs on the sending CPU), so the flood keeps that CPU busy, and the
// client, its router and the listener's work for it share the other, as an
// attacked server's other cores would. Unpinned, the generator ran on one
// CPU while ksoftirqd answered on the other, outran the answers twice over,
// and the client's SYNs met a full ring often enough to push its p99 past
// a second (p99 under 60 ms pinned, in three runs).
func (cl *cookieLab) startFlood(t *testing.T, frame []byte, src pktgen.Sources, count uint64) *bgFlood {
	t.Helper()
	return cl.lab.startFlood(t, frame, src, count)
}

// startFlood is cookieLab.startFlood from l's NS end.
func (l *lab) startFlood(t *testing.T, frame []byte, src pktgen.Sources, count uint64) *bgFlood {
	t.Helper()
	if err := l.gen.SetSources(src); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &bgFlood{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		f.res, f.err = l.gen.Send(ctx, l.NS.Path(), l.Name, frame, count, 0)
	}()
	t.Cleanup(func() { cancel(); <-f.done })
	return f
}

// stop ends the flood and returns what it sent, and whether it was still
// running: whether it outlasted what the test ran beside it.
func (f *bgFlood) stop(t *testing.T) (pktgen.Result, bool) {
	t.Helper()
	running := !f.ended()
	f.cancel()
	<-f.done
	if f.err != nil && !errors.Is(f.err, context.Canceled) {
		t.Errorf("flood: %v", f.err)
	}
	return f.res, running
}

// ended says whether the flood has ended by itself (sent its count, or
// met its timeout).
func (f *bgFlood) ended() bool { return closed(f.done) }

// closed says, without waiting, whether done has been closed.
func closed(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}
