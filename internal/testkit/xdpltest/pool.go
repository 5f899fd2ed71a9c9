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
var pool = struct {
	sync.Mutex
	free map[string][]*maps.Limiter
}{free: make(map[string][]*maps.Limiter)}

// freshEnv names the variable that turns the reuse off.
const freshEnv = "XDPLTEST_FRESH"

// poolKey is what decides the program a load verifies and the maps it
// creates, as one comparable string; "" for a limiter that must not be
// shared (adopted pinned maps are another process's state).
func poolKey(opts maps.Options) string {
	if opts.Pinned != nil || os.Getenv(freshEnv) == "1" {
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
		pool.Lock()
		free := pool.free[key]
		if len(free) == 0 {
			pool.Unlock()
			break
		}
		l = free[len(free)-1]
		pool.free[key] = free[:len(free)-1]
		pool.Unlock()
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

// release returns l to the pool, or closes it when it cannot be shared.
func release(l *maps.Limiter, key string) {
	if key == "" {
		l.Close()
		return
	}
	pool.Lock()
	pool.free[key] = append(pool.free[key], l)
	pool.Unlock()
}
