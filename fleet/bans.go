// SPDX-License-Identifier: Apache-2.0

package fleet

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/xdplimit/xdplimit/banfeed"
	"github.com/xdplimit/xdplimit/maps"
)

// BanTable is the local ban table (maps.Limiter). A datapath that has one
// shares its bans with the fleet: a ban started on any host, by a rule or
// by hand, is enforced by every host after their next syncs, and an unban
// on any host ends it everywhere.
type BanTable interface {
	Bans() ([]maps.Ban, error)
	BanAll([]maps.BanRequest) ([]maps.BanResult, error)
	Unban(p netip.Prefix) (bool, error)
	BanLookupOn() (bool, error)
	EnableBanLookup() error
	BanLimits() (maps.BanLimits, error)
	BansCapacity() uint32
}

// banSource names the fleet's bans in their reasons, metrics and logs.
const banSource = banfeed.Fleet

// The fleet's bans are one Redis hash: prefix -> "expiry|origin|reason",
// the expiry in wall-clock ms. Each host merges it with its table every
// sync, remembering what both sides agreed on last time (known): a ban
// known and now missing on one side was unbanned there. Anyone who can
// write that Redis can write the hash: every entry passes banfeed's gate
// (bans.go's callers never trust it), and the merge never fails for one
// entry.
func (e *Engine) bansKey() string { return "xdpl:" + e.opts.Fleet.Namespace + ":bans" }

type fleetBan struct {
	expiresMs int64
	origin    string
	reason    string
}

func (b fleetBan) String() string {
	return strconv.FormatInt(b.expiresMs, 10) + "|" + b.origin + "|" + b.reason
}

// parseFleetBan reads a value of the hash.
func parseFleetBan(s string) (fleetBan, bool) {
	parts := strings.SplitN(s, "|", 3)
	if len(parts) != 3 {
		return fleetBan{}, false
	}
	ms, err := strconv.ParseInt(parts[0], 10, 64)
	return fleetBan{ms, parts[1], parts[2]}, err == nil && ms > 0
}

// remoteBan is an entry of the hash the gate let through.
type remoteBan struct {
	field string // as written in the hash (another host's spelling, maybe)
	fleetBan
	req     maps.BanRequest
	escaped bool
}

// decodeBan reads and judges one entry of the hash at nowMs. It returns
// the ban the table may take, or the verdict that refuses it.
func decodeBan(field, value string, nowMs int64, lim maps.BanLimits) (remoteBan, banfeed.Verdict) {
	p, err := netip.ParsePrefix(field)
	if err != nil {
		return remoteBan{}, banfeed.Verdict{Refused: banfeed.Malformed, Why: "the field is not a prefix"}
	}
	b, ok := parseFleetBan(value)
	if !ok {
		return remoteBan{}, banfeed.Verdict{Refused: banfeed.Malformed, Why: "the value is not expiry|origin|reason"}
	}
	// At most ~292 years: a time.Duration.
	left := time.Duration(min(max(b.expiresMs-nowMs, -1), math.MaxInt64/int64(time.Millisecond))) * time.Millisecond
	v := banfeed.Check(banSource, banfeed.Offer{Prefix: p, Left: left, Origin: b.origin, Reason: b.reason}, lim)
	if v.Refused != "" {
		return remoteBan{}, v
	}
	return remoteBan{field: field, fleetBan: b, req: v.Ban, escaped: v.Escaped}, v
}

// banSlack: expiries closer than this are the same ban (each host turns
// the time left into its own clock's expiry).
const banSlack = int64(time.Second / time.Millisecond)

// maxBanRead bounds the entries of the hash one sync reads: twice what the
// host may hold from it, and at least 4096. A larger hash is read a part
// per sync, the next part at the next.
func maxBanRead(lim maps.BanLimits) int { return max(2*lim.MaxImported, 4096) }

// syncBans merges the local ban table with the fleet's.
func (e *Engine) syncBans(ctx context.Context, pre *banPrefetch) error {
	tr, err := pre.wait()
	if err != nil {
		return err
	}
	m := &banMerge{e: e, bt: pre.bt, lim: pre.lim, nowMs: tr.nowMs}
	held := m.sortTable(tr.bans)
	m.remote, m.refused, m.gone, err = e.readRemote(ctx, pre.scan, m.local, m.nowMs, m.lim)
	if err != nil {
		return err
	}
	m.round = e.bans.Begin(held, m.lim, m.bt.BansCapacity())
	defer m.round.End()
	m.push, m.known, m.wide = map[string]any{}, map[netip.Prefix]int64{}, map[netip.Prefix]string{}
	for p, l := range m.local {
		m.mergeLocal(p, l)
	}
	e.noteWide(m.wide)
	for _, p := range sortedPrefixes(m.remote) {
		m.mergeRemote(p)
	}
	lookupErr := e.applyBans(m.bt, m.apply, m.local, m.known, m.round)
	if err := e.writeBans(ctx, m.push, m.gone); err != nil {
		return err
	}
	e.knownBans = m.known
	return lookupErr
}

// banMerge is one sync's merge of the local ban table with the hash: the
// two sides, and what the merge decides for each prefix.
type banMerge struct {
	e       *Engine
	bt      BanTable
	lim     maps.BanLimits
	nowMs   int64
	round   *banfeed.Round
	local   map[netip.Prefix]fleetBan
	hostOwn map[netip.Prefix]bool // this host's own feed's bans
	remote  map[netip.Prefix]remoteBan
	refused map[netip.Prefix]bool // refused, left in the hash
	push    map[string]any        // to write to the hash
	gone    []string              // fields to delete from the hash
	known   map[netip.Prefix]int64
	apply   []remoteBan
	wide    map[netip.Prefix]string // local bans not shared, and why
}

// sortTable sorts the table's bans into the fleet's (local) and this
// host's own feed's; it returns how many of the fleet's the table holds.
func (m *banMerge) sortTable(bans []maps.Ban) (held int) {
	m.local, m.hostOwn = map[netip.Prefix]fleetBan{}, map[netip.Prefix]bool{}
	for _, b := range bans {
		if b.Shadow {
			continue // never enforced here: not the fleet's either
		}
		if banfeed.HostFeed(b) {
			// A ban of this host's own feed (its CrowdSec bouncer):
			// not shared, not taken for an unban, not replaced.
			m.hostOwn[b.Prefix] = true
			continue
		}
		m.local[b.Prefix] = fleetBan{m.nowMs + b.Left.Milliseconds(), m.e.opts.HostID + " " + b.Origin, b.Reason}
		if banfeed.From(b, banSource) {
			held++
		}
	}
	return held
}

// mergeLocal settles local ban l of p against the hash: unbanned here when
// the hash lost it, pushed when it is newer here, applied when newer there.
func (m *banMerge) mergeLocal(p netip.Prefix, l fleetBan) {
	r, inRedis := m.remote[p]
	// A ban applied here lasts at most MaxBan: compare with that.
	rEnd := min(r.expiresMs, m.nowMs+maps.MaxBan.Milliseconds())
	k, wasKnown := m.e.knownBans[p]
	switch {
	case !inRedis && !m.refused[p] && wasKnown && l.expiresMs <= k+banSlack:
		// Unbanned elsewhere (the hash lost it): unban here.
		if _, err := m.bt.Unban(p); err != nil {
			m.e.bans.Refuse("unban "+p.String(), banfeed.Datapath, p.String(), "unban: "+err.Error())
			m.known[p] = k // retried at the next sync, never pushed back
			return
		}
		m.e.opts.Logf("fleet: %s unbanned by another host", p)
		return
	case !inRedis || l.expiresMs > r.expiresMs+banSlack:
		if why := unshareable(p, l, m.nowMs, m.lim); why != "" {
			// Every other host would refuse it: it holds here only.
			m.wide[p] = why
			return
		}
		m.push[p.String()] = l.String()
	case rEnd > l.expiresMs+banSlack:
		if m.round.Admit(false) {
			m.apply = append(m.apply, r)
		}
	}
	m.known[p] = max(l.expiresMs, r.expiresMs)
}

// mergeRemote settles the hash's ban of p when the table does not hold
// it: deleted when it was unbanned here, else applied if the round admits.
func (m *banMerge) mergeRemote(p netip.Prefix) {
	r := m.remote[p]
	if _, ok := m.local[p]; ok || m.hostOwn[p] {
		return
	}
	if k, wasKnown := m.e.knownBans[p]; wasKnown && r.expiresMs <= k+banSlack {
		m.gone = append(m.gone, r.field) // unbanned here
		return
	}
	if !m.round.Admit(true) {
		return // a later sync, not known meanwhile
	}
	m.apply = append(m.apply, r)
	m.known[p] = r.expiresMs
}

// writeBans writes the merge's changes to the hash in one transaction.
func (e *Engine) writeBans(ctx context.Context, push map[string]any, gone []string) error {
	if len(push)+len(gone) == 0 {
		return nil
	}
	pipe := e.client.TxPipeline()
	if len(push) > 0 {
		pipe.HSet(ctx, e.bansKey(), push)
	}
	if len(gone) > 0 {
		pipe.HDel(ctx, e.bansKey(), gone...)
	}
	_, err := pipe.Exec(ctx)
	return err
}

// readRemote reads the hash (a bounded part of it when it is large) and
// passes each entry through the gate. It returns the bans let through by
// prefix; the prefixes of entries refused but left in the hash (they are
// there: not unbanned); and the fields to delete, malformed or ended.
func (e *Engine) readRemote(ctx context.Context, scan *banScan, local map[netip.Prefix]fleetBan, nowMs int64, lim maps.BanLimits) (
	remote map[netip.Prefix]remoteBan, refused map[netip.Prefix]bool, gone []string, err error) {
	var want []string
	for p := range local {
		want = append(want, p.String())
	}
	for p := range e.knownBans {
		if _, ok := local[p]; !ok {
			want = append(want, p.String())
		}
	}
	limit := maxBanRead(lim)
	read, next, err := readBans(ctx, e.client, scan, want)
	if err != nil {
		return nil, nil, nil, err
	}
	e.banCursor = next
	e.m.banHash.Set(float64(read.size))
	if read.full {
		e.bans.Clear(banfeed.LimitRead)
	} else {
		e.bans.Limited(banfeed.LimitRead, fmt.Sprintf("the hash holds %d entries, more than the %d a sync reads: "+
			"reading it a part per sync", read.size, limit))
	}
	if read.oversized > 0 {
		e.bans.RefuseAll(int(read.oversized), banfeed.Malformed, fmt.Sprintf("%d hash entries", read.oversized),
			"longer than any ban, deleted unread")
	}
	remote, refused = map[netip.Prefix]remoteBan{}, map[netip.Prefix]bool{}
	for f, v := range read.entries {
		r, verdict := decodeBan(f, v, nowMs, lim)
		switch verdict.Refused {
		case "":
		case banfeed.Malformed, banfeed.Expired:
			// No host wants it: removed. Each entry counts (a prefix
			// banned again may end again).
			gone = append(gone, f)
			e.bans.Refuse(f+"\x00"+v, verdict.Refused, f, verdict.Why)
			continue
		default:
			// Left in place: another host's limits may allow it. Once
			// per prefix, whatever is written in its value meanwhile.
			e.bans.Refuse(f, verdict.Refused, f, verdict.Why)
			if p, err := netip.ParsePrefix(f); err == nil {
				refused[maps.CanonicalBanPrefix(p)] = true
			}
			continue
		}
		p := r.req.Prefix
		if o, dup := remote[p]; dup && o.expiresMs >= r.expiresMs {
			continue // two spellings of one prefix: the longer ban
		}
		remote[p] = r
	}
	return remote, refused, gone, nil
}

// applyBans applies the admitted bans in one batch. A ban the datapath
// refuses is counted and skipped (and not known: tried again at the next
// sync); the others hold. It makes sure the datapath looks when any
// applied (this process owns the control word); only that can fail.
func (e *Engine) applyBans(bt BanTable, apply []remoteBan, local map[netip.Prefix]fleetBan, known map[netip.Prefix]int64, round *banfeed.Round) error {
	if len(apply) == 0 {
		return nil
	}
	reqs := make([]maps.BanRequest, len(apply))
	for i, r := range apply {
		reqs[i] = r.req
	}
	res, err := bt.BanAll(reqs)
	if err != nil && res == nil {
		return fmt.Errorf("%w: %v", errDatapath, err)
	}
	applied := 0
	for i, r := range apply {
		p := r.req.Prefix
		_, held := local[p]
		if res[i].Err != nil {
			e.bans.Refuse(r.field, banfeed.Datapath, r.field, res[i].Err.Error())
			round.Undo(!held)
			if held {
				known[p] = local[p].expiresMs
			} else {
				delete(known, p)
			}
			continue
		}
		applied++
		if r.escaped {
			e.bans.Escaped(r.field)
		}
	}
	if applied == 0 {
		return err
	}
	on, lerr := bt.BanLookupOn()
	if lerr == nil && !on {
		lerr = bt.EnableBanLookup()
	}
	if lerr != nil {
		return fmt.Errorf("%w: %v", errDatapath, lerr)
	}
	if err != nil {
		return fmt.Errorf("%w: %v", errDatapath, err)
	}
	return nil
}

// unshareable says why the other hosts would refuse local ban l of p (as
// this host's limits judge): "" when they would take it. A ban forced by
// hand wider than bans.min_prefix, or one written into the table past the
// checks, stays on this host: pushed, it would come back refused, and
// look unbanned.
func unshareable(p netip.Prefix, l fleetBan, nowMs int64, lim maps.BanLimits) string {
	v := banfeed.Check(banSource, banfeed.Offer{Prefix: p, Left: time.Duration(l.expiresMs-nowMs) * time.Millisecond}, lim)
	if v.Refused == banfeed.TooWide || v.Refused == banfeed.TooLong {
		return v.Why
	}
	return ""
}

// noteWide logs once each local ban the other hosts would refuse.
func (e *Engine) noteWide(wide map[netip.Prefix]string) {
	for p, why := range wide {
		if _, logged := e.wideBans[p]; !logged {
			e.opts.Logf("fleet: not sharing the ban of %s (%s); it holds on this host only", p, why)
		}
	}
	e.wideBans = wide
}

func sortedPrefixes(m map[netip.Prefix]remoteBan) []netip.Prefix {
	ps := make([]netip.Prefix, 0, len(m))
	for p := range m {
		ps = append(ps, p)
	}
	slices.SortFunc(ps, func(a, b netip.Prefix) int { return a.Compare(b) })
	return ps
}
