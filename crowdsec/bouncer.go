package crowdsec

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// Target applies decisions; the daemon implements it over its ban table.
// The Bouncer calls it from one goroutine at a time.
type Target interface {
	// Ban bans p (masked; IPv4 as a 4-byte prefix, never IPv4-mapped)
	// for d with this origin and reason. A ban already held on exactly p
	// gets the new end, origin and reason.
	Ban(p netip.Prefix, d time.Duration, origin, reason string) error
	// Unban ends the ban on exactly p if, and only if, the ban held there
	// has this origin, and says whether it ended one. A ban from anywhere
	// else (manual, a rule's, another feed's) must be left alone.
	Unban(p netip.Prefix, origin string) (bool, error)
}

// Bouncer polls a CrowdSec Local API's decision stream and applies its
// ban decisions through a Target.
//
// The first poll, and the first after any failed poll (LAPI down or
// restarting, a refused key, an answer over a limit or garbled), asks for
// everything (startup=true) and applies it. Such a resynchronisation never
// removes a ban the Target already holds merely because the LAPI no longer
// lists it: the Bouncer keeps no list of its own, and the bans it applied
// end on their own when their duration runs out. Only what the LAPI
// reports deleted is unbanned, and only where the ban carries the same
// origin (Origin(origin, scenario)) as one this Bouncer would have set.
// The LAPI reports a deletion (cscli decisions delete, or expiry) in the
// deleted list of the next poll, also of the poll after (it looks back
// 2 s), and a startup answer lists every decision it still holds as
// expired: an Unban that finds nothing is normal.
//
// Within a poll the deleted list is applied before the new one, so a
// prefix both deleted and decided again ends up banned.
type Bouncer struct {
	cfg    Config
	rules  *rules
	target Target
	http   *http.Client

	mu     sync.Mutex // one poll at a time
	resync bool

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
	b := &Bouncer{cfg: cfg, rules: r, target: t, http: hc, resync: true}
	b.stats.init()
	return b, nil
}

// PollResult is what one successful poll did.
type PollResult struct {
	Startup  bool // a full resynchronisation (startup=true)
	New      int  // decisions in the new list
	Deleted  int  // decisions in the deleted list
	Applied  int  // Target.Ban calls that succeeded
	Unbanned int  // Target.Unban calls that ended a ban
	NotHeld  int  // Target.Unban calls that found no ban of ours
	Skipped  map[SkipReason]int
	Took     time.Duration
}

// Poll asks the LAPI once and applies the answer. A *PollError says that
// nothing was applied; the next poll then resynchronises.
func (b *Bouncer) Poll(ctx context.Context) (PollResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	start := time.Now()
	res := PollResult{Startup: b.resync, Skipped: map[SkipReason]int{}}
	s, err := b.fetch(ctx, res.Startup)
	if err != nil {
		b.resync = true
		b.record(func(st *Stats) { st.Polls++; st.PollErrors[err.(*PollError).Kind]++ })
		return res, err
	}
	b.apply(s, &res)
	res.Took = time.Since(start)
	b.resync = false
	now := b.cfg.Now()
	b.record(func(st *Stats) {
		st.Polls++
		if res.Startup {
			st.Resyncs++
		}
		st.Applied += uint64(res.Applied)
		st.Unbanned += uint64(res.Unbanned)
		st.NotHeld += uint64(res.NotHeld)
		for r, n := range res.Skipped {
			st.Skipped[r] += uint64(n)
		}
		st.LastSuccess = now
	})
	return res, nil
}

// firstSkip is one skip reason's count in a poll and its first example,
// logged once when the poll ends.
type firstSkip struct {
	n       int
	example string
}

func (b *Bouncer) apply(s *Stream, res *PollResult) {
	res.New, res.Deleted = len(s.New), len(s.Deleted)
	firsts := map[SkipReason]*firstSkip{}
	skip := func(r SkipReason, d *Decision, err error) {
		res.Skipped[r]++
		f := firsts[r]
		if f == nil {
			f = &firstSkip{}
			firsts[r] = f
			if d != nil {
				f.example = fmt.Sprintf("decision %d (%q %q %q): %v", d.ID, clean(d.Scope, 32), clean(d.Value, 64), clean(d.Type, 32), err)
			} else {
				f.example = fmt.Sprint(err)
			}
		}
		f.n++
	}
	for range s.Malformed {
		skip(SkipMalformed, nil, fmt.Errorf("%d list elements were not decision objects", s.Malformed))
	}

	for i := range s.Deleted {
		d := &s.Deleted[i]
		a, why, err := b.rules.check(d, true)
		if why != "" {
			skip(why, d, err)
			continue
		}
		ended, err := b.target.Unban(a.prefix, a.origin)
		switch {
		case err != nil:
			skip(SkipTarget, d, fmt.Errorf("unban %s: %w", a.prefix, err))
		case ended:
			res.Unbanned++
		default:
			res.NotHeld++
		}
	}

	// Coalesced per prefix, the longest decision winning: a prefix can
	// come twice (1.2.3.4 and ::ffff:1.2.3.4 are two LAPI values), and a
	// shorter duplicate applied second would cut the ban short.
	type pending struct {
		a action
		d *Decision
	}
	byPrefix := make(map[netip.Prefix]int, len(s.New))
	var todo []pending
	for i := range s.New {
		d := &s.New[i]
		a, why, err := b.rules.check(d, false)
		if why != "" {
			skip(why, d, err)
			continue
		}
		if j, ok := byPrefix[a.prefix]; ok {
			if a.dur > todo[j].a.dur {
				todo[j] = pending{a, d}
			}
			continue
		}
		byPrefix[a.prefix] = len(todo)
		todo = append(todo, pending{a, d})
	}
	for _, p := range todo {
		if err := b.target.Ban(p.a.prefix, p.a.dur, p.a.origin, p.a.reason); err != nil {
			skip(SkipTarget, p.d, fmt.Errorf("ban %s: %w", p.a.prefix, err))
			continue
		}
		res.Applied++
	}

	for _, r := range SkipReasons {
		if f := firsts[r]; f != nil && r.logged() {
			b.cfg.Log.Warn("crowdsec: decisions skipped", "reason", string(r), "count", f.n, "first", f.example)
		}
	}
	level := b.cfg.Log.Debug
	if res.Startup {
		level = b.cfg.Log.Info
	}
	level("crowdsec: poll applied", "startup", res.Startup, "new", res.New, "deleted", res.Deleted,
		"applied", res.Applied, "unbanned", res.Unbanned, "skipped", sum(res.Skipped))
}

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
