// SPDX-License-Identifier: Apache-2.0

package fleet_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/xdplimit/xdplimit/internal/cpupin"
	"github.com/xdplimit/xdplimit/internal/harness/fleetsim"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/pktgen"
)

// A token bucket's time written far ahead in Redis, by anyone who can
// write the fleet's keys, stalls the key for the level's burst and the
// policy's debt_horizon at most: the sync that reads it sets the key back
// in Redis, counts it, and folds no more than that into the host's bucket,
// which admits again once the horizon has passed. A Redis whose reply
// claims more than the script can answer changes nothing.
func TestFleetDebtHorizon(t *testing.T) {
	r, ns := startRedis(t)
	const horizon, tol = 2 * time.Second, 200 * time.Millisecond // burst 200 at 1000/s
	pol := strings.Replace(fleetPolicy(r.Addr(), "{algorithm: token_bucket, rate: 1000/s, burst: 200, scope: fleet}"),
		"  sync: 100ms\n", "  sync: 100ms\n  debt_horizon: 2s\n", 1)
	f, _ := newHosts(t, testutil.DialIn(ns), 1, pol)
	h := f.Hosts[0]
	pkt := pktgen.UDP4(src, dst, 4000, 53, 16)
	// From one CPU: a key's first packet on a CPU whose admission sketch
	// has not seen it passes untracked (docs/design.md).
	send := func(what string) bool {
		t.Helper()
		var ok bool
		err := cpupin.OnCPU(0, func() (err error) { ok, err = h.Send(pkt); return err })
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return ok
	}
	ctx := context.Background()
	sync := func(what string) {
		t.Helper()
		f.Advance(100 * time.Millisecond)
		if res := h.E.Sync(ctx); res.Err != nil || res.Exchanged != 1 {
			t.Fatalf("%s: sync %+v", what, res)
		}
	}
	// A new source gets its state entry at its second packet.
	for range 3 {
		if !send("before the write") {
			t.Fatal("a packet within the burst was refused")
		}
	}
	sync("the first")

	c := r.Client()
	defer c.Close()
	key := tbKey(t, c)
	// 1e15 us: more than thirty years ahead of the fleet's clock.
	if err := c.Set(ctx, key, "1000000000000000000000", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if !send("after the write") {
		t.Fatal("refused before any sync read the write")
	}
	sync("the one that reads the write")
	if n := gathered(t, h.E.Metrics(), "xdplimit_fleet_debt_clamped_total", "", ""); n != 1 {
		t.Errorf("xdplimit_fleet_debt_clamped_total = %v, want 1", n)
	}
	nowUs := float64(fleetsim.WallBase+int64(f.Now())) / 1e3
	v, err := c.Get(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	tat, err := strconv.ParseFloat(v, 64)
	if err != nil || tat-nowUs > float64(horizon+tol)/1e3+1 {
		t.Errorf("Redis holds %q, %.0f us ahead of now: want at most the burst and the horizon, %v", v, tat-nowUs, horizon+tol)
	}
	if send("right after") {
		t.Error("admitted right after a debt of the burst and the horizon was folded in")
	}
	// The bucket's tolerance is spent: it admits again once tat - tol <=
	// now, the horizon after the fold. A packet every 100 ms keeps the key
	// in its sketch: an idle key's first packet passes untracked, as any
	// new key's does (docs/design.md).
	var admitted time.Duration
	for step := 100 * time.Millisecond; step <= horizon+time.Second; step += 100 * time.Millisecond {
		f.Advance(100 * time.Millisecond)
		if send("after the fold") {
			admitted = step
			break
		}
	}
	if admitted <= horizon || admitted > horizon+200*time.Millisecond {
		t.Errorf("the key admitted again %v after the fold (0: not within %v), want within 200 ms after the horizon, %v",
			admitted, horizon+time.Second, horizon)
	}
}

// tbKey is the one token-bucket key in Redis.
func tbKey(t *testing.T, c *redis.Client) string {
	t.Helper()
	keys, err := c.Keys(context.Background(), "xdpl:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if !strings.HasSuffix(k, ":hosts") {
			return k
		}
	}
	t.Fatalf("no token-bucket key among %v", keys)
	return ""
}
