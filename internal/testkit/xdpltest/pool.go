// SPDX-License-Identifier: Apache-2.0

package xdpltest

import (
	"fmt"
	"os"
	"sync"

	"github.com/xdplimit/xdplimit/maps"
)

// The program verified once per build: Load takes a limiter loaded with the
// same options by an earlier test, reset (maps.Limiter.Reset: every map as
// a new limiter's), instead of loading the program again. Verifying
// xdpl_main is most of a load's cost (a third of a second here, seconds
// under emulation), and a test binary asks for the same few builds hundreds
// of times. XDPLTEST_FRESH=1 loads every time, to rule the reuse out when a
// test fails.
var pool struct {
	sync.Mutex
	idle []idle // oldest first
}

// idle is a limiter no test is using, and what it was loaded with.
type idle struct {
	key string
	l   *maps.Limiter
}

// maxIdle bounds the limiters kept between tests: each holds its maps'
// memory (tens of MiB at the tests' sizes), and the 6.1 VM's 2 GiB ran out
// when every build a test binary used stayed loaded. A binary mostly
// alternates between two or three builds; the least recently released goes
// first.
const maxIdle = 3

// freshEnv names the variable that turns the reuse off.
const freshEnv = "XDPLTEST_FRESH"

// maxPooledSources is the largest state table a pooled limiter has: one of
// the program's default size (1M sources) holds hundreds of MiB, too much
// to keep idle in a VM, and few tests ask for it.
const maxPooledSources = 1 << 16

// poolKey is what decides the program a load verifies and the maps it
// creates, as one comparable string; "" for a limiter that is not shared:
// adopted pinned maps (another process's state), or large tables.
func poolKey(opts maps.Options) string {
	if opts.Pinned != nil || os.Getenv(freshEnv) == "1" ||
		opts.MaxSources == 0 || opts.MaxSources > maxPooledSources {
		return ""
	}
	if opts.TrackAfter == 0 {
		opts.TrackAfter = maps.DefaultTrackAfter
	}
	if opts.MaxBans == 0 {
		opts.MaxBans = maps.DefaultMaxBans
	}
	frame := opts.BenchFrame
	opts.BenchFrame = nil
	return fmt.Sprintf("%+v frame=%x", opts, frame)
}

// take returns a limiter loaded with opts: one from the pool, reset, or a
// new one. key is where release returns it.
func take(opts maps.Options) (l *maps.Limiter, key string, err error) {
	key = poolKey(opts)
	for key != "" {
		if l = takeIdle(key); l == nil {
			break
		}
		// A test may have closed its limiter itself: the reset fails on
		// the closed descriptors, and a new one is loaded.
		if err := l.Reset(); err == nil {
			return l, key, nil
		}
		l.Close()
	}
	l, err = maps.Load(opts)
	return l, key, err
}

// takeIdle removes the most recently released idle limiter loaded as key
// from the pool; nil when there is none.
func takeIdle(key string) *maps.Limiter {
	pool.Lock()
	defer pool.Unlock()
	for i := len(pool.idle) - 1; i >= 0; i-- {
		if pool.idle[i].key == key {
			l := pool.idle[i].l
			pool.idle = append(pool.idle[:i], pool.idle[i+1:]...)
			return l
		}
	}
	return nil
}

// release returns l to the pool, or closes it when it cannot be shared.
func release(l *maps.Limiter, key string) {
	if key == "" {
		l.Close()
		return
	}
	pool.Lock()
	pool.idle = append(pool.idle, idle{key, l})
	var evicted []idle
	if n := len(pool.idle) - maxIdle; n > 0 {
		evicted = append(evicted, pool.idle[:n]...)
		pool.idle = append(pool.idle[:0], pool.idle[n:]...)
	}
	pool.Unlock()
	for _, e := range evicted {
		e.l.Close()
	}
}
