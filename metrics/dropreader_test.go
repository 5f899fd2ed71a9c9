// SPDX-License-Identifier: Apache-2.0

package metrics_test

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/metrics"
)

// fakeRing is one CPU's ring of size samples, written to by the test.
type fakeRing struct {
	size    uint64
	written uint64
	calls   [][]uint64 // the cursors it was read with
}

func (f *fakeRing) DropRing(cursor []uint64) ([]maps.DropSample, uint64, []uint64, error) {
	f.calls = append(f.calls, slices.Clone(cursor))
	from := uint64(0)
	if len(cursor) > 0 {
		from = cursor[0]
	}
	n := f.written - from
	var s []maps.DropSample
	for i := f.written - min(n, f.size); i < f.written; i++ {
		s = append(s, maps.DropSample{Source: netip.AddrFrom4([4]byte{10, 0, 0, byte(i)})})
	}
	return s, n, []uint64{f.written}, nil
}

// top's reader starts at what is written, hands samples over at each redraw with its
// own cursor, and tells what a wrapped ring overwrote.
func TestDropReader(t *testing.T) {
	ring := &fakeRing{size: 4, written: 7}
	r, err := metrics.NewDropReader(ring)
	if err != nil {
		t.Fatal(err)
	}
	redraw := make(chan time.Time, 1)
	ctx := context.Background()
	for _, c := range []struct {
		add       uint64
		got, lost int
	}{{3, 3, 0}, {0, 0, 0}, {10, 4, 6}} {
		ring.written += c.add
		redraw <- time.Now()
		s, written, err := r.Next(ctx, redraw)
		if err != nil {
			t.Fatal(err)
		}
		if len(s) != c.got || int(written)-len(s) != c.lost {
			t.Errorf("after %d more: %d samples of %d written, want %d with %d lost", c.add, len(s), written, c.got, c.lost)
		}
	}
	if want := [][]uint64{nil, {7}, {10}, {10}}; !slices.EqualFunc(ring.calls, want, slices.Equal) {
		t.Errorf("read with cursors %v, want %v", ring.calls, want)
	}

	// No redraw comes: the end of ctx ends the wait, and nothing is read.
	ctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := r.Next(ctx, make(chan time.Time)); !errors.Is(err, context.Canceled) {
		t.Errorf("Next after the end of ctx: %v, want context.Canceled", err)
	}
	if len(ring.calls) != 4 {
		t.Errorf("the ring was read %d times, want 4", len(ring.calls))
	}
}

// floodRing is a ring of size samples that a flood writes 3 more into
// before each read, and that says when it was read.
type floodRing struct {
	fakeRing
	reads chan struct{}
}

func (f *floodRing) DropRing(cursor []uint64) ([]maps.DropSample, uint64, []uint64, error) {
	f.written += 3
	defer func() {
		// Never blocks: a test that fell behind has reads to take.
		select {
		case f.reads <- struct{}{}:
		default:
		}
	}()
	return f.fakeRing.DropRing(cursor)
}

// Between two redraws top reads the ring every DropPoll: a flood that
// would wrap it between redraws loses nothing, and one redraw hands over
// every sample of its interval.
func TestDropReaderPollsBetweenRedraws(t *testing.T) {
	ring := &floodRing{fakeRing: fakeRing{size: 4}, reads: make(chan struct{}, 16)}
	r, err := metrics.NewDropReader(ring)
	if err != nil {
		t.Fatal(err)
	}
	<-ring.reads
	redraw := make(chan time.Time, 1)
	type result struct {
		n       int
		written uint64
		err     error
	}
	done := make(chan result)
	go func() {
		s, w, err := r.Next(context.Background(), redraw)
		done <- result{len(s), w, err}
	}()
	for range 3 { // three polls, 9 samples written into a ring of 4
		<-ring.reads
	}
	redraw <- time.Now()
	<-ring.reads
	got := <-done
	if got.err != nil {
		t.Fatal(got.err)
	}
	// A slow machine may poll once more before the redraw arrives.
	if got.written < 12 || uint64(got.n) != got.written {
		t.Errorf("three polls and a redraw: %d samples of %d written, want all of at least 12", got.n, got.written)
	}
}
