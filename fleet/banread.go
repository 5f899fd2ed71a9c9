// SPDX-License-Identifier: Apache-2.0

package fleet

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/xdplimit/xdplimit/banfeed"
	"github.com/xdplimit/xdplimit/maps"
)

// The fleet's ban hash is written by every host, and by anyone else who can
// write to its Redis: a sync must not read it whole whatever it holds. A
// script reads it instead, at most a bound of entries a call from where the
// last call stopped (HSCAN's cursor), and deletes server-side the entries
// longer than any host writes (maxBanField, maxBanValue), which would
// otherwise cross the network however few are read. It answers the
// cursor to go on from ('0': the end), the hash's size and how many it
// deleted.
var readBansScript = redis.NewScript(`
local cur, want = ARGV[1], tonumber(ARGV[2])
local maxf, maxv = tonumber(ARGV[3]), tonumber(ARGV[4])
local out, dropped, n = {}, 0, 0
repeat
  local r = redis.call('HSCAN', KEYS[1], cur, 'COUNT', 1000)
  cur = r[1]
  local kv = r[2]
  for i = 1, #kv, 2 do
    if #kv[i] > maxf or #kv[i + 1] > maxv then
      redis.call('HDEL', KEYS[1], kv[i])
      dropped = dropped + 1
    else
      out[#out + 1] = kv[i]
      out[#out + 1] = kv[i + 1]
    end
    n = n + 1
  end
until cur == '0' or n >= want
return {'xdpl1', cur, redis.call('HLEN', KEYS[1]), dropped, out}
`)

// getBansScript reads the given fields (HMGET), answering nil for one
// longer than ARGV[1].
var getBansScript = redis.NewScript(`
local maxv = tonumber(ARGV[1])
local vals = redis.call('HMGET', KEYS[1], unpack(ARGV, 2))
for i = 1, #vals do
  if vals[i] and #vals[i] > maxv then vals[i] = false end
end
return vals
`)

const (
	// maxBanField is longer than any prefix a host writes (an IPv6 /128
	// is at most 43 bytes).
	maxBanField = 64
	// maxBanValue is longer than any value a host writes: expiry, host id,
	// rule and reason (at most ~250 bytes).
	maxBanValue = 512
	// getBansChunk bounds the fields of one getBansScript call (Lua's
	// unpack takes at most ~8000 values).
	getBansChunk = 1000
)

// banRead is what a sync read of the ban hash.
type banRead struct {
	entries   map[string]string // field -> value
	full      bool              // every entry was read: one missing is not in the hash
	size      int64             // entries in the hash
	oversized int64             // entries deleted for their length
}

// banPrefetch is what the merge of the bans reads while the sync's
// exchange is on the wire: the hash's first part (a scan sent in the
// exchange's pipeline) and the local table, read meanwhile. Reading the
// whole table takes tens of milliseconds however few bans it holds (its
// every slot is copied), and on a loaded machine over a hundred: after the
// round trip, it added that to every sync, and a second round trip for the
// hash doubled a slow link's share (syncs of a second over a 200 ms round
// trip, some over their deadline).
type banPrefetch struct {
	bt    BanTable
	err   error // reading the limits
	lim   maps.BanLimits
	scan  *banScan
	table chan tableRead // one read, buffered: never waited for when the exchange fails
}

// tableRead is the ban table, and the wall clock (ms) when it was read.
type tableRead struct {
	bans  []maps.Ban
	nowMs int64
	err   error
}

// start reads the limits and starts reading the table; nil-safe (no
// bans).
func (p *banPrefetch) start(e *Engine) {
	if p == nil {
		return
	}
	lim, err := p.bt.BanLimits()
	if err != nil {
		p.err = fmt.Errorf("%w: reading the ban limits: %v", errDatapath, err)
		return
	}
	p.lim = banfeed.Limits(lim)
	p.scan = &banScan{key: e.bansKey(), cursor: e.banCursor, max: maxBanRead(p.lim)}
	p.table = make(chan tableRead, 1)
	wall, bt := e.opts.Wall, p.bt
	go func() {
		nowMs := wall() / 1e6
		// With no ban in force here (the datapath does not look bans
		// up: no ban rule, and none in its tries when the policy was
		// applied or since the fleet's), there is nothing to share:
		// the table, whose every slot a read copies, is not read.
		on, err := bt.BanLookupOn()
		if err != nil || !on {
			p.table <- tableRead{nil, nowMs, err}
			return
		}
		bans, err := bt.Bans()
		p.table <- tableRead{bans, nowMs, err}
	}()
}

// started: start ran (the exchange was sent).
func (p *banPrefetch) started() bool { return p != nil && (p.err != nil || p.scan != nil) }

// scanOf is the hash's scan to send with the exchange, if any.
func (p *banPrefetch) scanOf() *banScan {
	if p == nil {
		return nil
	}
	return p.scan
}

// wait returns the ban table the exchange read, once the read is done.
func (p *banPrefetch) wait() (tableRead, error) {
	if p.err != nil {
		return tableRead{}, p.err
	}
	tr := <-p.table
	if tr.err != nil {
		return tr, fmt.Errorf("%w: reading the ban table: %v", errDatapath, tr.err)
	}
	return tr, nil
}

// banScan is a sync's read of the ban hash, from cursor, at most max
// entries: the script's call goes in the sync's exchange pipeline, so that
// reading the bans adds no round trip of its own (over a slow link, a
// second round trip per sync doubled every sync's length).
type banScan struct {
	key, cursor string
	max         int
	vals        []any // out: the script's reply
	err         error // out
}

// queue adds the scan's script call to pipe (by hash, or with its text).
func (s *banScan) queue(ctx context.Context, pipe redis.Pipeliner, text bool) *redis.Cmd {
	args := []any{s.cursor, s.max, maxBanField, maxBanValue}
	if text {
		return readBansScript.Eval(ctx, pipe, []string{s.key}, args...)
	}
	return readBansScript.EvalSha(ctx, pipe, []string{s.key}, args...)
}

// readBans finishes a read of the hash whose scan came back with the
// exchange: it reads the fields in want whatever the scan reached, since
// when the scan does not cover the whole hash, those are the entries the
// merge must know about (the bans this host holds or knew). It returns the
// cursor the next read goes on from.
func readBans(ctx context.Context, c redis.UniversalClient, scan *banScan, want []string) (banRead, string, error) {
	r := banRead{entries: map[string]string{}}
	key, cursor := scan.key, scan.cursor
	if scan.err != nil {
		return r, cursor, scan.err
	}
	next, kv, err := r.parse(scan.vals)
	if err != nil {
		return r, cursor, err
	}
	r.full = cursor == "0" && next == "0"
	for i := 0; i+1 < len(kv); i += 2 {
		f, ok1 := kv[i].(string)
		v, ok2 := kv[i+1].(string)
		if !ok1 || !ok2 {
			return r, cursor, fmt.Errorf("%w: ban hash entry %T %T", errNotRedis, kv[i], kv[i+1])
		}
		r.entries[f] = v
	}
	if r.full {
		return r, next, nil
	}
	for len(want) > 0 {
		chunk := want[:min(len(want), getBansChunk)]
		want = want[len(chunk):]
		args := make([]any, 0, len(chunk)+1)
		args = append(args, maxBanValue)
		for _, f := range chunk {
			args = append(args, f)
		}
		got, err := getBansScript.Run(ctx, c, []string{key}, args...).Slice()
		if err != nil {
			return r, cursor, err
		}
		if len(got) != len(chunk) {
			return r, cursor, fmt.Errorf("%w: %d values for %d ban fields", errNotRedis, len(got), len(chunk))
		}
		for i, v := range got {
			if s, ok := v.(string); ok {
				r.entries[chunk[i]] = s
			}
		}
	}
	return r, next, nil
}

// parse checks readBansScript's reply: a Redis that is not running our
// script must not ban anything.
func (r *banRead) parse(vals []any) (next string, kv []any, err error) {
	bad := fmt.Errorf("%w: ban script answered %d values", errNotRedis, len(vals))
	if len(vals) != 5 || vals[0] != "xdpl1" {
		return "", nil, bad
	}
	var ok [4]bool
	next, ok[0] = vals[1].(string)
	r.size, ok[1] = vals[2].(int64)
	r.oversized, ok[2] = vals[3].(int64)
	kv, ok[3] = vals[4].([]any)
	if ok != [4]bool{true, true, true, true} {
		return "", nil, bad
	}
	if _, err := strconv.ParseUint(next, 10, 64); err != nil {
		return "", nil, fmt.Errorf("%w: ban hash cursor %q", errNotRedis, next)
	}
	return next, kv, nil
}
