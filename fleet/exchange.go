package fleet

import (
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
// (tests with an injected clock).
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
if add > 0 then
  local from = now - tonumber(ARGV[4])
  if tat < from then tat = from end
  tat = tat + add
  redis.call('SET', KEYS[1], string.format('%.3f', tat), 'PX',
    math.ceil((tat - now) / 1000) + tonumber(ARGV[2]))
end
return {'xdpl1', string.format('%.3f', tat - now)}
`)

// tbExchange is one token-bucket key of a sync.
type tbExchange struct {
	key    string
	addUs  float64 // this host's admissions since the last sync, x T, in us
	ttlMs  int64   // how long an idle key outlives its debt
	nowUs  string  // "" = the server's clock
	spanUs float64 // time since this host's previous sync
	debtUs float64 // out: how far the fleet's tat runs ahead of now
	err    error
}

// fwExchange is one fixed-window key of a sync.
type fwExchange struct {
	key   string // includes the window's index
	add   uint64
	ttlMs int64
	total uint64 // out: the fleet's count in the window
	err   error
}

// exchange sends a sync's keys in one pipeline: one round trip per server
// (go-redis splits a cluster pipeline by node and sends to all at once).
// The script is loaded on a NOSCRIPT reply, once per server that lacks it.
func exchange(ctx context.Context, c redis.UniversalClient, tb []tbExchange, fw []fwExchange) error {
	if len(tb)+len(fw) == 0 {
		return nil
	}
	run := func() ([]redis.Cmder, error) {
		pipe := c.Pipeline()
		for i := range tb {
			e := &tb[i]
			tbScript.EvalSha(ctx, pipe, []string{e.key},
				strconv.FormatFloat(e.addUs, 'f', 3, 64), e.ttlMs, e.nowUs,
				strconv.FormatFloat(e.spanUs, 'f', 3, 64))
		}
		for i := range fw {
			e := &fw[i]
			pipe.IncrBy(ctx, e.key, int64(e.add))
			pipe.PExpire(ctx, e.key, msDuration(e.ttlMs))
		}
		return pipe.Exec(ctx)
	}
	cmds, err := run()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		if lerr := loadScript(ctx, c); lerr != nil {
			return lerr
		}
		cmds, err = run()
	}
	if err != nil && !isRedisError(err) {
		return err
	}
	for i := range tb {
		tb[i].debtUs, tb[i].err = readTB(cmds[i])
	}
	for i := range fw {
		fw[i].total, fw[i].err = readFW(cmds[len(tb)+2*i])
	}
	return firstErr(tb, fw)
}

// loadScript loads the script on every server (a cluster's masters).
func loadScript(ctx context.Context, c redis.UniversalClient) error {
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			return tbScript.Load(ctx, n).Err()
		})
	}
	return tbScript.Load(ctx, c).Err()
}

// readTB checks the script's reply: a Redis that is not running our script
// (or not a Redis) must not move any bucket.
func readTB(c redis.Cmder) (float64, error) {
	vals, err := c.(*redis.Cmd).Slice()
	if err != nil {
		return 0, err
	}
	if len(vals) != 2 || vals[0] != "xdpl1" {
		return 0, fmt.Errorf("%w: script answered %v", errNotRedis, vals)
	}
	s, ok := vals[1].(string)
	if !ok {
		return 0, fmt.Errorf("%w: script answered %v", errNotRedis, vals)
	}
	d, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(d) || math.IsInf(d, 0) {
		return 0, fmt.Errorf("%w: debt %q", errNotRedis, s)
	}
	return max(d, 0), nil
}

func readFW(c redis.Cmder) (uint64, error) {
	n, err := c.(*redis.IntCmd).Result()
	if err != nil {
		return 0, err
	}
	if n < 0 {
		return 0, fmt.Errorf("%w: negative count %d", errNotRedis, n)
	}
	return uint64(n), nil
}

func firstErr(tb []tbExchange, fw []fwExchange) error {
	for _, e := range tb {
		if e.err != nil {
			return e.err
		}
	}
	for _, e := range fw {
		if e.err != nil {
			return e.err
		}
	}
	return nil
}
