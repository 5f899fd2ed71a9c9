// SPDX-License-Identifier: Apache-2.0

package fleet_test

import (
	"context"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/pktgen"
)

// A sync long after the previous one (a sync slowed by many keys, Redis
// back after an outage) charges a key's few units from the start of that
// long span: the key's tat then lies behind now, and its expiry must still
// be a valid one (the benchmark's sync of 100k keys failed with "invalid
// expire time in 'set'").
func TestFleetSyncAfterLongGap(t *testing.T) {
	r, ns := startRedis(t)
	f, _ := newHosts(t, testutil.DialIn(ns), 1, fleetPolicy(r.Addr(),
		"{algorithm: token_bucket, rate: 1000/s, burst: 200, scope: fleet}"))
	h := f.Hosts[0]
	pkt := pktgen.UDP4(src, dst, 4000, 53, 16)
	for _, gap := range []time.Duration{100 * time.Millisecond, 5 * time.Second} {
		// A new source gets its state entry at its second packet.
		for range 3 {
			if ok, err := h.Send(pkt); err != nil || !ok {
				t.Fatalf("packet before a gap of %v: admitted %v, %v", gap, ok, err)
			}
		}
		f.Advance(gap)
		if res := h.E.Sync(context.Background()); res.Err != nil || res.Exchanged != 1 {
			t.Fatalf("sync %v after the previous one: %+v", gap, res)
		}
	}
}
