// SPDX-License-Identifier: Apache-2.0

package fleet

// The sync loop: a sync every interval, and between syncs the datapath's
// ring of reported keys drained into the next sync's report set.

import (
	"context"
	"sync"
	"time"

	"github.com/xdplimit/xdplimit/maps"
)

// Run syncs every interval until ctx ends. Between syncs it drains the
// datapath's ring of reported keys several times, so that the ring only has
// to hold the keys reported in a fraction of an interval: a ring read once
// per sync lost every report past its size (131k keys), and always the same
// keys' (the ring fills in admission order). Every withinEvery it counts
// the keys within their share, for the gauge.
func (e *Engine) Run(ctx context.Context) {
	defer every(ctx, max(e.opts.Fleet.Sync/4, 5*time.Millisecond), e.drain)()
	defer every(ctx, withinEvery, func() { _ = e.CountWithin() })()
	t := time.NewTicker(e.opts.Fleet.Sync)
	defer t.Stop()
	for {
		e.Sync(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// reports are the keys the datapath reported since the last sync, at most
// MaxKeys; the others are counted and report again in a later epoch (their
// pending units wait in their state entries).
type reports struct {
	mu      sync.Mutex // also serialises reads of the ring
	keys    map[maps.FleetKey]struct{}
	dropped int
	err     error
}

// drain moves what the ring holds into the report set.
func (e *Engine) drain() {
	r := &e.reports
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.keys == nil {
		r.keys = map[maps.FleetKey]struct{}{}
	}
	_, err := e.dp.DrainFleetKeys(1<<20, func(k maps.FleetKey) {
		if len(r.keys) >= e.opts.MaxKeys {
			r.dropped++
			return
		}
		r.keys[k] = struct{}{}
	})
	if err != nil && r.err == nil {
		r.err = err
	}
}

// takeReports drains once more and hands over the keys reported so far.
func (e *Engine) takeReports() (map[maps.FleetKey]struct{}, int, error) {
	e.drain()
	r := &e.reports
	r.mu.Lock()
	defer r.mu.Unlock()
	keys, dropped, err := r.keys, r.dropped, r.err
	r.keys, r.dropped, r.err = nil, 0, nil
	return keys, dropped, err
}

// every runs fn every d until ctx ends, on a goroutine of its own; the
// function it returns waits for that goroutine.
func every(ctx context.Context, d time.Duration, fn func()) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				fn()
			}
		}
	}()
	return func() { <-done }
}
