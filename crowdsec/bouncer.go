// SPDX-License-Identifier: Apache-2.0

package crowdsec

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/xdplimit/xdplimit/internal/termsafe"
)

// Ban is a decision that passed the Bouncer's checks: one of the
// configured types, scope Ip or Range (the value parsed strictly), inside
// the origin and scenario filters. Type, Origin and Scenario are the LAPI's
// text, unescaped: whoever added the decision wrote them.
type Ban struct {
	ID     int64
	Prefix netip.Prefix // an Ip decision's address as a host prefix, a Range's CIDR as written
	// Left is a new decision's time left, positive; zero for a deleted one.
	Left                   time.Duration
	Type, Origin, Scenario string
}

// Batch is one poll's decisions for the Target.
type Batch struct {
	// Startup: a full resynchronisation (startup=true). New then holds
	// every decision the LAPI has in force, Deleted every one it still
	// remembers as ended.
	Startup      bool
	New, Deleted []Ban
}

// Applied is what the Target did with a Batch.
type Applied struct {
	Banned   int // bans written (new, renewed, or from earlier batches that waited)
	Unbanned int // bans ended because their decisions were deleted
	NotHeld  int // deletions that ended no ban (never applied, already ended, or someone else's)
}

// Target applies decisions; the daemon's is Table, over its ban table.
// The Bouncer calls it from one goroutine at a time, once per successful
// poll (with an empty Batch when nothing changed).
type Target interface {
	// Apply applies b: the deleted decisions first, then the new ones,
	// so that a prefix both deleted and decided again ends up banned.
	// An error says the ban table could not be read or written at all:
	// the next poll then resynchronises.
	Apply(b Batch) (Applied, error)
}

// Bouncer polls a CrowdSec Local API's decision stream and applies its
// ban decisions through a Target.
//
// The first poll, the first after any failed poll (LAPI down or
// restarting, a refused key, an answer over a limit or garbled, a Target
// that failed), and the first once Resync has passed since the last
// resynchronisation ask for everything (startup=true) and hand it to the
// Target. The Target must not remove a ban merely because a
// resynchronisation no longer lists its decision: bans end on their own
// when their duration runs out, and only what the LAPI reports deleted is
// unbanned. The LAPI reports a deletion (cscli decisions delete, or expiry)
// in the deleted list of the next poll, also of the poll after (it looks
// back 2 s), and a startup answer lists every decision it still holds as
// expired: a deletion that finds nothing is normal.
type Bouncer struct {
	cfg    Config
	rules  *rules
	target Target
	http   *http.Client

	mu sync.Mutex // one poll at a time
	// lastFull is the start of the last successful resynchronisation:
	// zero before the first and after a failed poll, so that the next
	// poll resynchronises.
	lastFull time.Time

	statsMu sync.Mutex
	stats   Stats
}

// New checks cfg (see Config for the defaults) and makes a Bouncer; Run
// or Poll start talking to the LAPI.
func New(cfg Config, t Target) (*Bouncer, error) {
	cfg, r, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = newHTTPClient()
	}
	b := &Bouncer{cfg: cfg, rules: r, target: t, http: hc}
	b.stats.init()
	return b, nil
}

// PollResult is what one successful poll did.
type PollResult struct {
	Startup bool // a full resynchronisation (startup=true)
	New     int  // decisions in the new list
	Deleted int  // decisions in the deleted list
	Applied      // what the Target did
	Skipped map[SkipReason]int
	Took    time.Duration
}

// Poll asks the LAPI once and applies the answer. A *PollError says that
// nothing was applied (or, of kind KindTarget, that the Target failed
// part way); the next poll then resynchronises.
func (b *Bouncer) Poll(ctx context.Context) (PollResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	start, began := time.Now(), b.cfg.Now()
	res := PollResult{Startup: b.lastFull.IsZero() || began.Sub(b.lastFull) >= b.cfg.Resync, Skipped: map[SkipReason]int{}}
	s, err := b.fetch(ctx, res.Startup)
	if err != nil {
		b.lastFull = time.Time{}
		b.record(func(st *Stats) { st.Polls++; st.PollErrors[err.(*PollError).Kind]++ })
		return res, err
	}
	err = b.apply(s, &res)
	res.Took = time.Since(start)
	if err != nil {
		b.lastFull = time.Time{}
	} else {
		level := b.cfg.Log.Debug
		if res.Startup {
			level, b.lastFull = b.cfg.Log.Info, began
		}
		level("crowdsec: poll applied", "startup", res.Startup, "new", res.New, "deleted", res.Deleted,
			"banned", res.Banned, "unbanned", res.Unbanned, "skipped", sum(res.Skipped), "took", res.Took)
	}
	now := b.cfg.Now()
	b.record(func(st *Stats) {
		st.Polls++
		for r, n := range res.Skipped {
			st.Skipped[r] += uint64(n)
		}
		if err != nil {
			st.PollErrors[KindTarget]++
			return
		}
		if res.Startup {
			st.Resyncs++
		}
		st.Applied += uint64(res.Banned)
		st.Unbanned += uint64(res.Unbanned)
		st.NotHeld += uint64(res.NotHeld)
		st.LastSuccess = now
	})
	return res, err
}

// firstSkip is one skip reason's count in a poll and its first example,
// logged once when the poll ends.
type firstSkip struct {
	n       int
	example string
}

// apply checks the answer's decisions and hands those that pass to the
// Target.
func (b *Bouncer) apply(s *Stream, res *PollResult) error {
	res.New, res.Deleted = len(s.New), len(s.Deleted)
	firsts := map[SkipReason]*firstSkip{}
	skip := func(r SkipReason, d *Decision, err error) {
		res.Skipped[r]++
		f := firsts[r]
		if f == nil {
			f = &firstSkip{}
			firsts[r] = f
			if d != nil {
				f.example = fmt.Sprintf("decision %d (%s %s %s): %v", d.ID, quote(d.Scope, 32), quote(d.Value, 64), quote(d.Type, 32), err)
			} else {
				f.example = fmt.Sprint(err)
			}
		}
		f.n++
	}
	for range s.Malformed {
		skip(SkipMalformed, nil, fmt.Errorf("%d list elements were not decision objects", s.Malformed))
	}
	batch := Batch{Startup: res.Startup}
	for _, l := range []struct {
		in      []Decision
		out     *[]Ban
		deleted bool
	}{{s.Deleted, &batch.Deleted, true}, {s.New, &batch.New, false}} {
		for i := range l.in {
			d := &l.in[i]
			ban, why, err := b.rules.check(d, l.deleted)
			if why != "" {
				skip(why, d, err)
				continue
			}
			*l.out = append(*l.out, ban)
		}
	}
	for _, r := range SkipReasons {
		if f := firsts[r]; f != nil && r.logged() {
			b.cfg.Log.Warn("crowdsec: decisions skipped", "reason", string(r), "count", f.n, "first", f.example)
		}
	}
	applied, err := b.target.Apply(batch)
	if err != nil {
		return &PollError{KindTarget, err}
	}
	res.Applied = applied
	return nil
}

// quote is outside text for a log line: escaped for a terminal, cut to n
// bytes, in quotes.
func quote(s string, n int) string { return `"` + termsafe.Clip(s, n) + `"` }

func sum(m map[SkipReason]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// Run polls every Interval until ctx ends, and returns ctx's error. After
// a failed poll it waits longer, doubling from Interval up to MaxBackoff
// (plus up to a quarter at random, so the bouncers of a fleet do not all
// come back to a restarted LAPI at once, with MaxBackoff still the bound).
func (b *Bouncer) Run(ctx context.Context) error {
	failures := 0
	for {
		_, err := b.Poll(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		wait := b.cfg.Interval
		if err != nil {
			failures++
			wait = backoff(b.cfg.Interval, b.cfg.MaxBackoff, failures, rand.Float64())
			b.cfg.Log.Warn("crowdsec: poll failed", "err", err, "failures", failures, "retry_in", wait)
		} else if failures > 0 {
			b.cfg.Log.Info("crowdsec: LAPI reachable again, resynchronised", "after_failures", failures)
			failures = 0
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// backoff is the wait after n failures in a row: base doubled n-1 times,
// plus jitter (in [0, 1)) times a quarter of that, never above limit.
func backoff(base, limit time.Duration, n int, jitter float64) time.Duration {
	d := base
	for i := 1; i < n && d < limit; i++ {
		d *= 2
	}
	d += time.Duration(jitter * float64(d) / 4)
	return min(d, limit)
}
