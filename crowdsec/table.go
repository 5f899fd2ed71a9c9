// SPDX-License-Identifier: Apache-2.0

package crowdsec

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/xdplimit/xdplimit/banfeed"
	"github.com/xdplimit/xdplimit/maps"
)

// Source names the bans a Table applies: their reasons start with it
// ("crowdsec: ORIGIN/SCENARIO: TYPE ID", banfeed.Reason), and banfeed's
// metrics and log lines carry it. The fleet leaves such bans to each host
// (banfeed.HostFeed).
const Source = banfeed.CrowdSec

// BanTable is the ban table decisions are applied to (maps.Limiter).
type BanTable interface {
	Bans() ([]maps.Ban, error)
	BanAll([]maps.BanRequest) ([]maps.BanResult, error)
	UnbanAll([]netip.Prefix) ([]bool, error)
	BanLookupOn() (bool, error)
	EnableBanLookup() error
	BanLimits() (maps.BanLimits, error)
	BansCapacity() uint32
}

// MaxLive bounds the decisions in force a Table remembers (about 150 bytes
// each): as many as one answer may hold.
const MaxLive = DefaultMaxDecisions

// slack: ends closer than this are the same (the table counts time left
// from its own reading of the clock).
const slack = time.Second

// Table is the Target over xdplimit's ban table. Every new decision passes
// banfeed.Check as source "crowdsec", under the limits of the policy in
// force (bans:): too wide, too long or malformed ones are refused, counted
// in the gate's metrics and logged once. Those that pass are remembered
// until they end, by decision id, and each prefix carries the ban of its
// decision that ends last: a shorter decision on a prefix does not cut a
// longer one short, and deleting one of two decisions leaves the other's
// ban. A prefix is unbanned when its last decision is deleted, and only
// when the ban held there is a CrowdSec one (banfeed.From): a manual ban,
// a rule's or the fleet's on the same prefix is left alone, and one that
// lasts longer than the decision keeps the prefix until it ends.
//
// Each Apply is one round of the gate: at most bans.max_per_sync bans
// written, and at most bans.max_imported (or half the table) held. What a
// round cannot write waits, and is tried again at the next Apply (the next
// poll), while its decision lasts; so does a ban the datapath refused.
//
// A resynchronisation only adds: decisions the LAPI no longer lists keep
// their bans until they end. After a restart of the daemon the Table is
// empty; the bouncer's first poll is a resynchronisation, which lists every
// decision in force again.
type Table struct {
	bt   BanTable
	gate *banfeed.Gate
	now  func() time.Time

	mu       sync.Mutex
	live     map[int64]*decision
	byPrefix map[netip.Prefix][]*decision
	dirty    map[netip.Prefix]bool // prefixes whose ban may have to change
}

// decision is a decision in force that the gate let through.
type decision struct {
	id      int64
	prefix  netip.Prefix // canonical
	end     time.Time
	reason  string // as stored: banfeed.Reason
	escaped bool
}

// NewTable makes the Target of bt, counting and logging through gate
// (banfeed.NewGate with Source). now is the clock (nil: time.Now).
func NewTable(bt BanTable, gate *banfeed.Gate, now func() time.Time) *Table {
	if now == nil {
		now = time.Now
	}
	return &Table{bt: bt, gate: gate, now: now, live: map[int64]*decision{},
		byPrefix: map[netip.Prefix][]*decision{}, dirty: map[netip.Prefix]bool{}}
}

// Pending is the number of prefixes whose ban waits for a later round.
func (t *Table) Pending() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.dirty)
}

// Apply remembers b's decisions and brings the ban table in line with them.
func (t *Table) Apply(b Batch) (Applied, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	lim, err := t.bt.BanLimits()
	if err != nil {
		return Applied{}, fmt.Errorf("reading the ban limits: %w", err)
	}
	lim = banfeed.Limits(lim)
	now := t.now()
	deleted := map[netip.Prefix]bool{}
	for _, d := range b.Deleted {
		if !d.Prefix.IsValid() {
			continue
		}
		p := maps.CanonicalBanPrefix(d.Prefix)
		t.forget(d.ID)
		deleted[p], t.dirty[p] = true, true
	}
	overflow := 0
	for _, d := range b.New {
		v := banfeed.Check(Source, banfeed.Offer{Prefix: d.Prefix, Left: d.Left, Origin: d.Origin + "/" + d.Scenario,
			Reason: d.Type + " " + strconv.FormatInt(d.ID, 10)}, lim)
		if v.Refused != "" {
			t.gate.Refuse(strconv.FormatInt(d.ID, 10)+" "+d.Prefix.String(), v.Refused, d.Prefix.String(), v.Why)
			continue
		}
		if _, known := t.live[d.ID]; !known && len(t.live) >= MaxLive {
			overflow++
			continue
		}
		t.forget(d.ID)
		p := v.Ban.Prefix
		dec := &decision{id: d.ID, prefix: p, end: now.Add(v.Ban.For), reason: v.Ban.Reason, escaped: v.Escaped}
		t.live[d.ID] = dec
		t.byPrefix[p] = append(t.byPrefix[p], dec)
		t.dirty[p] = true
	}
	if overflow > 0 {
		t.gate.Limited(banfeed.LimitRead, fmt.Sprintf("the LAPI lists more decisions in force than the %d a bouncer "+
			"remembers: %d not applied", MaxLive, overflow))
	} else {
		t.gate.Clear(banfeed.LimitRead)
	}
	t.expire(now)
	return t.reconcile(now, lim, deleted)
}

// forget drops decision id, if remembered.
func (t *Table) forget(id int64) {
	d, ok := t.live[id]
	if !ok {
		return
	}
	delete(t.live, id)
	ds := slices.DeleteFunc(t.byPrefix[d.prefix], func(x *decision) bool { return x == d })
	if len(ds) == 0 {
		delete(t.byPrefix, d.prefix)
	} else {
		t.byPrefix[d.prefix] = ds
	}
}

// expire forgets the decisions that ended: their bans ended with them.
func (t *Table) expire(now time.Time) {
	for id, d := range t.live {
		if !d.end.After(now) {
			t.forget(id)
		}
	}
}

// last is the decision on p that ends last, nil when none is in force.
func (t *Table) last(p netip.Prefix) *decision {
	var best *decision
	for _, d := range t.byPrefix[p] {
		if best == nil || d.end.After(best.end) {
			best = d
		}
	}
	return best
}

// reconcile writes the bans the dirty prefixes should have, within one
// round of the gate, and ends those whose decisions are all deleted.
// deleted are the prefixes of this batch's deletions (for the counts).
func (t *Table) reconcile(now time.Time, lim maps.BanLimits, deleted map[netip.Prefix]bool) (Applied, error) {
	var res Applied
	if len(t.dirty) == 0 {
		return res, nil
	}
	table, held, err := t.enforced()
	if err != nil {
		return res, err
	}
	dirty := make([]netip.Prefix, 0, len(t.dirty))
	for p := range t.dirty {
		dirty = append(dirty, p)
	}
	slices.SortFunc(dirty, func(a, b netip.Prefix) int { return a.Compare(b) })
	// Prefixes left without a decision first: the bans they end make room
	// for this round's.
	ended, err := t.unbanEnded(dirty, table, deleted, &res)
	if err != nil {
		return res, err
	}
	round := t.gate.Begin(held-ended, lim, t.bt.BansCapacity())
	defer round.End()
	reqs, reqOf, added := t.admit(dirty, table, now, deleted, round, &res)
	return res, t.ban(reqs, reqOf, added, round, &res)
}

// enforced is the ban table's enforced bans by prefix, and how many of
// them are ours.
func (t *Table) enforced() (table map[netip.Prefix]maps.Ban, held int, err error) {
	bans, err := t.bt.Bans()
	if err != nil {
		return nil, 0, fmt.Errorf("reading the ban table: %w", err)
	}
	table = make(map[netip.Prefix]maps.Ban, len(bans))
	for _, b := range bans {
		if b.Shadow {
			continue // never enforced: any ban may take its place
		}
		table[b.Prefix] = b
		if banfeed.From(b, Source) {
			held++
		}
	}
	return table, held, nil
}

// unbanEnded ends our bans on the dirty prefixes left without a decision,
// takes them out of table, and returns how many it ended.
func (t *Table) unbanEnded(dirty []netip.Prefix, table map[netip.Prefix]maps.Ban, deleted map[netip.Prefix]bool, res *Applied) (int, error) {
	var unban []netip.Prefix
	for _, p := range dirty {
		if t.last(p) != nil {
			continue
		}
		delete(t.dirty, p)
		if b, ok := table[p]; ok && banfeed.From(b, Source) {
			unban = append(unban, p)
		} else if deleted[p] {
			res.NotHeld++
		}
	}
	if len(unban) == 0 {
		return 0, nil
	}
	n := 0
	ended, err := t.bt.UnbanAll(unban)
	for i, p := range unban {
		delete(table, p)
		switch {
		case i < len(ended) && ended[i]:
			res.Unbanned++
			n++
		case deleted[p]:
			res.NotHeld++
		}
	}
	if err != nil {
		return n, fmt.Errorf("unbanning: %w", err)
	}
	return n, nil
}

// admit is the bans the dirty prefixes still under a decision need, as far
// as round admits them: with each, its decision and whether it adds an
// entry to the table.
func (t *Table) admit(dirty []netip.Prefix, table map[netip.Prefix]maps.Ban, now time.Time, deleted map[netip.Prefix]bool,
	round *banfeed.Round, res *Applied) (reqs []maps.BanRequest, reqOf []*decision, added []bool) {
	for _, p := range dirty {
		best := t.last(p)
		if best == nil {
			continue
		}
		if deleted[p] {
			res.NotHeld++ // another decision on p is still in force
		}
		b, inTable := table[p]
		ours := inTable && banfeed.From(b, Source)
		left := best.end.Sub(now)
		switch {
		case inTable && !ours && b.Left+slack >= left:
			continue // someone else's ban holds p as long: ours waits for it to end
		case ours && b.Reason == best.reason && (b.Left-left).Abs() < slack:
			delete(t.dirty, p) // in place already
			continue
		}
		if !round.Admit(!inTable) {
			continue // a later round
		}
		reqs = append(reqs, maps.BanRequest{Prefix: p, For: min(max(left, maps.MinBan), maps.MaxBan), Reason: best.reason})
		reqOf, added = append(reqOf, best), append(added, !inTable)
	}
	return reqs, reqOf, added
}

// ban writes the admitted bans in one batch and makes sure the datapath
// looks the table up when any was written.
func (t *Table) ban(reqs []maps.BanRequest, reqOf []*decision, added []bool, round *banfeed.Round, res *Applied) error {
	if len(reqs) == 0 {
		return nil
	}
	results, err := t.bt.BanAll(reqs)
	if err != nil && results == nil {
		return fmt.Errorf("banning: %w", err)
	}
	for i, r := range results {
		d := reqOf[i]
		if r.Err != nil {
			// Counted once; tried again at the next round.
			t.gate.Refuse(strconv.FormatInt(d.id, 10)+" "+d.prefix.String(), banfeed.Datapath, d.prefix.String(), r.Err.Error())
			round.Undo(added[i])
			continue
		}
		res.Banned++
		delete(t.dirty, d.prefix)
		if d.escaped {
			t.gate.Escaped(d.prefix.String())
		}
	}
	if err != nil {
		return fmt.Errorf("banning: %w", err)
	}
	if res.Banned == 0 {
		return nil
	}
	on, err := t.bt.BanLookupOn()
	if err == nil && !on {
		err = t.bt.EnableBanLookup()
	}
	return err
}
