// SPDX-License-Identifier: Apache-2.0

package fleet

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// The fleet's token buckets live in Redis as GCRA: one theoretical arrival
// time per key, in microseconds of the Redis server's clock (TIME), so the
// hosts' clocks never have to agree. A host adds what it admitted since its
// last sync (n units move tat by n x T, from now if tat is in the past) and
// reads back how far tat runs ahead of the server's now: the fleet's debt,
// which it folds into its own bucket. The units were admitted over the
// span since the host's previous sync, not at once: an idle bucket starts
// charging them from the span's start (ARGV[4]), else a host that admitted
// at exactly the rate would find the fleet a whole span in debt. Lua numbers are doubles: microseconds
// since 1970 keep a quarter-microsecond resolution, and rounding happens
// once per sync and key, not per packet. ARGV[3], when given, replaces TIME
// (tests with an injected clock). After a long span tat may stay behind
// now: the key then lives for ARGV[2] ms (a negative PX is an error that
// would fail the whole sync). A debt beyond ARGV[5] (the level's tolerance
// and the policy's debt horizon) was written by someone else: the key is
// set back to it, so that it stalls no host longer than the horizon, and
// the reply's third value says so.
var tbScript = redis.NewScript(`
local now
if ARGV[3] and ARGV[3] ~= '' then
  now = tonumber(ARGV[3])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local tat = tonumber(redis.call('GET', KEYS[1])) or 0
local add = tonumber(ARGV[1])
local maxd = tonumber(ARGV[5])
local write, clamped = false, 0
if add > 0 then
  local from = now - tonumber(ARGV[4])
  if tat < from then tat = from end
  tat = tat + add
  write = true
end
if tat - now > maxd then
  tat = now + maxd
  write, clamped = true, 1
end
if write then
  redis.call('SET', KEYS[1], string.format('%.3f', tat), 'PX',
    math.max(math.ceil((tat - now) / 1000), 0) + tonumber(ARGV[2]))
end
return {'xdpl1', string.format('%.3f', tat - now), clamped}
`)

// A fleet's fixed window is a hash per key and window: each host's count in
// a field of its own, so a host learns the fleet's total, how many hosts
// have reported the window, and what the other hosts hold: each its count,
// but at least its share (ARGV[4]) while the window is young (see fold in
// local.go). HGETALL is O(hosts).
var fwScript = redis.NewScript(`
redis.call('HINCRBY', KEYS[1], ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
local share = tonumber(ARGV[4])
local total, n, held = 0, 0, 0
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local v = tonumber(all[i + 1])
  total = total + v
  n = n + 1
  if all[i] ~= ARGV[1] then held = held + math.max(v, share) end
end
return {'xdpl1', total, n, held}
`)

// tbExchange is one token-bucket key of a sync.
type tbExchange struct {
	key    string
	addUs  float64 // this host's admissions since the last sync, x T, in us
	ttlMs  int64   // how long an idle key outlives its debt
	nowUs  string  // "" = the server's clock
	spanUs float64 // time since this host's previous sync
	// maxDebtUs: the most debt the key may carry, its tolerance and the
	// debt horizon.
	maxDebtUs float64
	debtUs    float64 // out: how far the fleet's tat runs ahead of now
	clamped   bool    // out: the key's debt was beyond maxDebtUs, and set back
	err       error
}

// fwExchange is one fixed-window key of a sync.
type fwExchange struct {
	key       string // includes the window's index
	add       uint64
	ttlMs     int64
	share     uint64 // one host's share of the limit
	total     uint64 // out: the fleet's count in the window
	reporters int    // out: hosts that have reported the window, this one included
	held      uint64 // out: the other reporters' counts, each at least share
	err       error
}

// heartbeat is a host's presence in the fleet: a sorted set of host names
// scored by their last sync (wall clock, ms), whose size after the stale
// ones are dropped is the number of live hosts.
type heartbeat struct {
	key    string
	member string
	nowMs  int64
	ttlMs  int64
	live   int64 // out
}

// exchange sends a sync's keys, the heartbeat and the read of the ban hash
// (scan, when not nil) in one pipeline: one round trip per server (go-redis
// splits a cluster pipeline by node and sends to all at once). The scripts
// go by their hash; on a NOSCRIPT reply (a server new or restarted empty)
// the pipeline is sent again with the scripts' text, which the server
// caches: two round trips, where loading each script first took four, more
// than the deadline on a link of a quarter of it. An error of the ban read
// is the scan's, for the merge of the bans to report; the keys are synced.
func exchange(ctx context.Context, c redis.UniversalClient, hb *heartbeat, tb []tbExchange, fw []fwExchange,
	ann *announce, scan *banScan) error {
	member := hb.member
	run := func(text bool) ([]redis.Cmder, error) {
		pipe := c.Pipeline()
		eval := func(s *redis.Script, keys []string, args ...any) {
			if text {
				s.Eval(ctx, pipe, keys, args...)
			} else {
				s.EvalSha(ctx, pipe, keys, args...)
			}
		}
		for i := range tb {
			e := &tb[i]
			eval(tbScript, []string{e.key},
				strconv.FormatFloat(e.addUs, 'f', 3, 64), e.ttlMs, e.nowUs,
				strconv.FormatFloat(e.spanUs, 'f', 3, 64), strconv.FormatFloat(e.maxDebtUs, 'f', 3, 64))
		}
		for i := range fw {
			e := &fw[i]
			eval(fwScript, []string{e.key}, member, e.add, e.ttlMs, e.share)
		}
		pipe.ZAdd(ctx, hb.key, redis.Z{Score: float64(hb.nowMs), Member: hb.member})
		pipe.ZRemRangeByScore(ctx, hb.key, "-inf", "("+strconv.FormatInt(hb.nowMs-hb.ttlMs, 10))
		pipe.ZCard(ctx, hb.key)
		pipe.PExpire(ctx, hb.key, msDuration(10*hb.ttlMs))
		if ann != nil {
			ann.queue(ctx, pipe)
		}
		if scan != nil {
			scan.queue(ctx, pipe, text)
		}
		return pipe.Exec(ctx)
	}
	cmds, err := run(false)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		cmds, err = run(true)
	}
	if err != nil && (!isRedisError(err) || !fromCommand(cmds, err)) {
		return err // the connection (or its AUTH), not a command
	}
	// The heartbeat decides whether Redis answers: an error there (a
	// refused AUTH comes back on every command) fails the sync. An error
	// on one key's command is that key's alone.
	hbCmds := cmds[len(tb)+len(fw) : len(tb)+len(fw)+4]
	for _, c := range hbCmds {
		if err := c.Err(); err != nil {
			return err
		}
	}
	live, _ := hbCmds[2].(*redis.IntCmd).Result()
	if live < 1 {
		return fmt.Errorf("%w: %d live hosts after this one's heartbeat", errNotRedis, live)
	}
	hb.live = live
	if ann != nil {
		n := len(ann.members) + 1
		ann.settle(cmds[len(tb)+len(fw)+4 : len(tb)+len(fw)+4+n])
	}
	for i := range tb {
		tb[i].debtUs, tb[i].clamped, tb[i].err = readTB(cmds[i], tb[i].maxDebtUs)
	}
	for i := range fw {
		fw[i].total, fw[i].reporters, fw[i].held, fw[i].err = readFW(cmds[len(tb)+i])
	}
	if scan != nil {
		scan.vals, scan.err = cmds[len(cmds)-1].(*redis.Cmd).Slice()
	}
	return nil
}

// readTB checks the script's reply: a Redis that is not running our script
// (or not a Redis) must not move any bucket, and the script never answers
// a debt beyond maxUs.
func readTB(c redis.Cmder, maxUs float64) (float64, bool, error) {
	vals, err := c.(*redis.Cmd).Slice()
	if err != nil {
		return 0, false, err
	}
	if len(vals) != 3 || vals[0] != "xdpl1" {
		return 0, false, fmt.Errorf("%w: script answered %v", errNotRedis, vals)
	}
	s, ok := vals[1].(string)
	clamped, cok := vals[2].(int64)
	if !ok || !cok || (clamped != 0 && clamped != 1) {
		return 0, false, fmt.Errorf("%w: script answered %v", errNotRedis, vals)
	}
	d, err := strconv.ParseFloat(s, 64)
	// The reply is rounded to the nanosecond (%.3f of microseconds).
	if err != nil || math.IsNaN(d) || math.IsInf(d, 0) || d > maxUs+0.001 {
		return 0, false, fmt.Errorf("%w: debt %q", errNotRedis, s)
	}
	return max(d, 0), clamped == 1, nil
}

func readFW(c redis.Cmder) (total uint64, reporters int, held uint64, err error) {
	vals, err := c.(*redis.Cmd).Slice()
	if err != nil {
		return 0, 0, 0, err
	}
	if len(vals) == 4 && vals[0] == "xdpl1" {
		t, ok1 := vals[1].(int64)
		n, ok2 := vals[2].(int64)
		h, ok3 := vals[3].(int64)
		if ok1 && ok2 && ok3 && t >= 0 && n >= 1 && h >= 0 {
			return uint64(t), int(n), uint64(h), nil
		}
	}
	return 0, 0, 0, fmt.Errorf("%w: script answered %v", errNotRedis, vals)
}

// fromCommand: err is one command's reply, not the connection's.
func fromCommand(cmds []redis.Cmder, err error) bool {
	for _, c := range cmds {
		if c.Err() == err {
			return true
		}
	}
	return false
}

// keyErrors counts the keys whose command failed, and returns the first
// error.
func keyErrors(tb []tbExchange, fw []fwExchange) (int, error) {
	n := 0
	var first error
	for _, e := range tb {
		if e.err != nil {
			n++
			first = cmp.Or(first, e.err)
		}
	}
	for _, e := range fw {
		if e.err != nil {
			n++
			first = cmp.Or(first, e.err)
		}
	}
	return n, first
}
