// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"context"
	"math/rand/v2"
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
// own (the drop log keeps another), the ring read every DropPoll between
// redraws, the samples handed over at each redraw.
type DropReader struct {
	ring   DropRing
	cursor []uint64
}

// DropPoll is how often top reads the ring between redraws. Each CPU's ring
// holds maps.Limiter.DropRingSize samples (16384 on two CPUs, at least
// 1024 on many): read once a second, a flood's would wrap it many times
// over between two reads.
const DropPoll = 100 * time.Millisecond

// maxHeld bounds the samples held between two redraws (a long --interval
// under a flood): past it, each new one replaces a held one at random, so
// that those handed over stay a uniform sample of the interval's.
const maxHeld = 1 << 18

// NewDropReader starts at what the ring holds now: earlier samples belong
// to no interval top shows.
func NewDropReader(ring DropRing) (*DropReader, error) {
	_, _, cursor, err := ring.DropRing(nil)
	if err != nil {
		return nil, err
	}
	return &DropReader{ring: ring, cursor: cursor}, nil
}

// Next reads the ring every DropPoll until the next redraw (a tick of
// redraw), reads it once more, and returns the samples written since the
// previous call, with how many the datapath wrote meanwhile: more than
// returned when a ring wrapped between two reads (or past maxHeld). When
// ctx ends first it returns ctx's error.
func (r *DropReader) Next(ctx context.Context, redraw <-chan time.Time) (samples []maps.DropSample, written uint64, err error) {
	poll := time.NewTicker(DropPoll)
	defer poll.Stop()
	var seen int
	read := func() error {
		s, w, next, err := r.ring.DropRing(r.cursor)
		if err != nil {
			return err
		}
		r.cursor = next
		written += w
		for _, d := range s {
			seen++
			if len(samples) < maxHeld {
				samples = append(samples, d)
			} else if j := rand.IntN(seen); j < maxHeld {
				samples[j] = d
			}
		}
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-poll.C:
			if err := read(); err != nil {
				return nil, 0, err
			}
		case <-redraw:
			if err := read(); err != nil {
				return nil, 0, err
			}
			return samples, written, nil
		}
	}
}
