package metrics

import (
	"context"
	"time"

	"github.com/xdplimit/xdplimit/maps"
)

// TopInterval is how often `xdplimit top` redraws unless told otherwise.
const TopInterval = time.Second

// DropRing is the ring of sampled drops as a reader sees it; *maps.Limiter
// is one.
type DropRing interface {
	DropRing(cursor []uint64) ([]maps.DropSample, uint64, []uint64, error)
}

// DropReader is how `xdplimit top` reads the drop ring, apart from top
// itself so that the benchmark measures what top counts: a cursor of its
// own (the drop log keeps another), samples taken once per redraw.
type DropReader struct {
	ring   DropRing
	cursor []uint64
}

// NewDropReader starts at what the ring holds now: earlier samples belong
// to no interval top shows.
func NewDropReader(ring DropRing) (*DropReader, error) {
	_, _, cursor, err := ring.DropRing(nil)
	if err != nil {
		return nil, err
	}
	return &DropReader{ring: ring, cursor: cursor}, nil
}

// Next waits for the next redraw (a tick of redraw) and returns the samples
// written since the previous call, with how many the datapath wrote
// meanwhile: more than returned when a ring wrapped before it was read.
// When ctx ends first it returns ctx's error.
func (r *DropReader) Next(ctx context.Context, redraw <-chan time.Time) (samples []maps.DropSample, written uint64, err error) {
	select {
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	case <-redraw:
	}
	samples, written, next, err := r.ring.DropRing(r.cursor)
	if err != nil {
		return nil, 0, err
	}
	r.cursor = next
	return samples, written, nil
}
