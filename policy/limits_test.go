// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"fmt"
	"reflect"
	"testing"
	"time"
)

func TestLimits(t *testing.T) {
	const tbFields = "token_bucket does not take %s; it takes rate and burst"
	runParseCases(t, []parseCase{
		{name: "token bucket", src: withLimit("algorithm: token_bucket, rate: 1000/s, burst: 2000"), check: wantLevel(0, Level{srcKey, tb1000})},
		{name: "token bucket bytes", src: withLimit("algorithm: token_bucket, rate: 8Mbit/s, burst: 64KB"),
			check: wantLevel(0, Level{srcKey, Limit{Algorithm: TokenBucket, Unit: Bytes, Count: 1_000_000, Per: time.Second, Burst: 64_000}})},
		{name: "token bucket byte burst as integer", src: withLimit("algorithm: token_bucket, rate: 1MB/s, burst: 3000"),
			check: wantLevel(0, Level{srcKey, Limit{Algorithm: TokenBucket, Unit: Bytes, Count: 1_000_000, Per: time.Second, Burst: 3000}})},
		{name: "token bucket per hour", src: withLimit("algorithm: token_bucket, rate: 1M/h, burst: 2k"),
			check: wantLevel(0, Level{srcKey, Limit{Algorithm: TokenBucket, Unit: Packets, Count: 1_000_000, Per: time.Hour, Burst: 2000}})},
		{name: "token bucket max burst", src: withLimit("algorithm: token_bucket, rate: 100k/s, burst: 4294967296"),
			check: wantLevel(0, Level{srcKey, Limit{Algorithm: TokenBucket, Unit: Packets, Count: 100_000, Per: time.Second, Burst: 1 << 32}})},
		{name: "token bucket one per hour", src: withLimit("algorithm: token_bucket, rate: 1/h, burst: 10"),
			check: wantLevel(0, Level{srcKey, Limit{Algorithm: TokenBucket, Unit: Packets, Count: 1, Per: time.Hour, Burst: 10}})},
		{name: "fixed window", src: withLimit("algorithm: fixed_window, packets: 100, window: 1s"),
			check: wantLevel(0, Level{srcKey, Limit{Algorithm: FixedWindow, Unit: Packets, Count: 100, Window: time.Second}})},
		{name: "sliding window bytes", src: withLimit("algorithm: sliding_window, bytes: 10MB, window: 100ms"),
			check: wantLevel(0, Level{srcKey, Limit{Algorithm: SlidingWindow, Unit: Bytes, Count: 10_000_000, Window: 100 * time.Millisecond}})},
		{name: "window max count", src: withLimit("algorithm: fixed_window, packets: 1099511627775, window: 24h"),
			check: wantLevel(0, Level{srcKey, Limit{Algorithm: FixedWindow, Unit: Packets, Count: 1<<40 - 1, Window: 24 * time.Hour}})},
		{name: "byte burst under a packet", src: withLimit("algorithm: token_bucket, rate: 1MB/s, burst: 1000"), warns: []string{
			"p.yaml:3:58: rules[0].limit.burst: burst 1000 is less than one 1500-byte packet; larger packets can never conform"}},

		{name: "algorithm missing", src: withLimit("rate: 1/s, burst: 1"), errs: []string{
			"p.yaml:3:12: rules[0].limit: algorithm is required: token_bucket, fixed_window, sliding_window or sliding_log"}},
		{name: "algorithm bad", src: withLimit("algorithm: gcra, rate: 1/s, burst: 1"), errs: []string{
			`p.yaml:3:24: rules[0].limit.algorithm: unknown algorithm "gcra"; use token_bucket, fixed_window, sliding_window, sliding_log or leaky_bucket`}},
		{name: "leaky bucket is the token bucket", src: withLimit("algorithm: leaky_bucket, rate: 1000/s, burst: 2000"), check: wantLevel(0, Level{srcKey, tb1000})},
		{name: "sliding log", src: withLimit("algorithm: sliding_log, packets: 5, window: 1m"),
			check: wantLevel(0, Level{srcKey, Limit{Algorithm: SlidingLog, Unit: Packets, Count: 5, Window: time.Minute}})},
		{name: "sliding log max", src: withLimit("algorithm: sliding_log, packets: 64, window: 1s"),
			check: wantLevel(0, Level{srcKey, Limit{Algorithm: SlidingLog, Unit: Packets, Count: 64, Window: time.Second}})},
		{name: "sliding log too many", src: withLimit("algorithm: sliding_log, packets: 65, window: 1s"), errs: []string{
			`p.yaml:3:46: rules[0].limit.packets: sliding_log holds at most 64 packets per window, got 65; use sliding_window or token_bucket for larger limits`}},
		{name: "sliding log bytes", src: withLimit("algorithm: sliding_log, bytes: 64, window: 1s"), errs: []string{
			`p.yaml:3:37: rules[0].limit.bytes: sliding_log counts packets, not bytes (it logs each admission's time); use sliding_window for a byte limit`}},
		{name: "sliding log fleet", src: "fleet: {redis: redis://127.0.0.1:6379/0}\n" + withLimit("algorithm: sliding_log, packets: 5, window: 1s, scope: fleet"), errs: []string{
			`p.yaml:4:68: rules[0].limit.scope: scope: fleet works with token_bucket and fixed_window, not sliding_log`}},
		{name: "unknown limit field", src: withLimit("algorithm: token_bucket, rate: 1/s, burst: 1, pps: 5"), errs: []string{
			`p.yaml:3:59: rules[0].limit: unknown field "pps"; allowed: algorithm, rate, burst, packets, bytes, window, scope`}},
		{name: "limit a string", src: "rules:\n  - name: r\n    limit: 1000/s\n", errs: []string{
			`p.yaml:3:12: rules[0].limit: expected a mapping with fields algorithm, rate, burst, packets, bytes, window, scope, got "1000/s"`}},
		{name: "rate bad", src: withLimit("algorithm: token_bucket, rate: 1000/sec, burst: 2000"), errs: []string{
			`p.yaml:3:44: rules[0].limit.rate: "1000/sec" ` + rateAdvice}},
		{name: "rate integer", src: withLimit("algorithm: token_bucket, rate: 1000, burst: 2000"), errs: []string{
			`p.yaml:3:44: rules[0].limit.rate: "1000" ` + rateAdvice}},
		{name: "rate zero", src: withLimit("algorithm: token_bucket, rate: 0/s, burst: 1"), errs: []string{
			"p.yaml:3:44: rules[0].limit.rate: rate must be greater than zero; to drop all traffic from an address, use deny"}},
		{name: "rate too high", src: withLimit("algorithm: token_bucket, rate: 200Gbit/s, burst: 1"), errs: []string{
			"p.yaml:3:44: rules[0].limit.rate: rate 200Gbit/s is above the maximum of 100Gbit/s"}},
		{name: "rate missing", src: withLimit("algorithm: token_bucket, burst: 1"), errs: []string{
			"p.yaml:3:12: rules[0].limit: rate is required for token_bucket, e.g. rate: 1000/s"}},
		{name: "burst missing", src: withLimit("algorithm: token_bucket, rate: 1/s"), errs: []string{
			"p.yaml:3:12: rules[0].limit: burst is required for token_bucket: the most a key may send at once above the rate, e.g. burst: 2000 (packets) or burst: 64KB (byte rates)"}},
		{name: "burst zero", src: withLimit("algorithm: token_bucket, rate: 1/s, burst: 0"), errs: []string{
			"p.yaml:3:56: rules[0].limit.burst: burst must be 1 to 4294967296, got 0"}},
		{name: "burst too big", src: withLimit("algorithm: token_bucket, rate: 1/s, burst: 4294967297"), errs: []string{
			"p.yaml:3:56: rules[0].limit.burst: burst must be 1 to 4294967296, got 4294967297"}},
		{name: "burst longer than the datapath holds", src: withLimit("algorithm: token_bucket, rate: 1/h, burst: 100000"), errs: []string{
			"p.yaml:3:56: rules[0].limit.burst: burst 100000 at 1 per 1h0m0s takes 100000h0m0s to refill; the datapath holds at most 20015h59m54.037927936s"}},
		{name: "burst bytes for packets", src: withLimit("algorithm: token_bucket, rate: 1/s, burst: 64KB"), errs: []string{
			"p.yaml:3:56: rules[0].limit.burst: burst 64KB is a byte size, but the rate counts packets"}},
		{name: "burst bad", src: withLimit("algorithm: token_bucket, rate: 1/s, burst: lots"), errs: []string{
			`p.yaml:3:56: rules[0].limit.burst: "lots" is not a packet count; use N, Nk, NM or NG (decimal: 1k = 1000)`}},
		{name: "burst bad bytes", src: withLimit("algorithm: token_bucket, rate: 1MB/s, burst: 64KiB"), errs: []string{
			`p.yaml:3:58: rules[0].limit.burst: "64KiB" is not a byte size; use N, NB, NKB, NMB or NGB (decimal: 1KB = 1000 B)`}},
		{name: "token bucket window fields", src: withLimit("algorithm: token_bucket, rate: 1/s, burst: 1, packets: 5, window: 1s"), errs: []string{
			"p.yaml:3:59: rules[0].limit.packets: " + fmt.Sprintf(tbFields, "packets"),
			"p.yaml:3:71: rules[0].limit.window: " + fmt.Sprintf(tbFields, "window")}},
		{name: "window rate fields", src: withLimit("algorithm: fixed_window, packets: 5, window: 1s, rate: 1/s, burst: 1"), errs: []string{
			"p.yaml:3:62: rules[0].limit.rate: fixed_window does not take rate; it takes packets or bytes, and window",
			"p.yaml:3:73: rules[0].limit.burst: fixed_window does not take burst; it takes packets or bytes, and window"}},
		{name: "window both units", src: withLimit("algorithm: sliding_window, packets: 5, bytes: 5KB, window: 1s"), errs: []string{
			"p.yaml:3:52: rules[0].limit.bytes: give packets or bytes, not both"}},
		{name: "window no unit", src: withLimit("algorithm: sliding_window, window: 1s"), errs: []string{
			"p.yaml:3:12: rules[0].limit: sliding_window needs packets or bytes, e.g. packets: 100"}},
		{name: "window missing", src: withLimit("algorithm: fixed_window, packets: 5"), errs: []string{
			"p.yaml:3:12: rules[0].limit: window is required for fixed_window, e.g. window: 1s"}},
		{name: "window bad", src: withLimit("algorithm: fixed_window, packets: 5, window: 1sec"), errs: []string{
			`p.yaml:3:58: rules[0].limit.window: "1sec" is not a duration; use Go durations like 100ms, 1s, 1m or 1h`}},
		{name: "window too short", src: withLimit("algorithm: fixed_window, packets: 5, window: 500us"), errs: []string{
			`p.yaml:3:58: rules[0].limit.window: window 500us is out of range; use 1ms to 24h`}},
		{name: "window count zero", src: withLimit("algorithm: fixed_window, packets: 0, window: 1s"), errs: []string{
			"p.yaml:3:47: rules[0].limit.packets: packets must be 1 to 1099511627775 (2^40-1), got 0"}},
		{name: "window count too big", src: withLimit("algorithm: fixed_window, bytes: 2000GB, window: 1s"), errs: []string{
			"p.yaml:3:45: rules[0].limit.bytes: bytes must be 1 to 1099511627775 (2^40-1), got 2000GB"}},
		{name: "window packets with unit", src: withLimit("algorithm: fixed_window, packets: 5MB, window: 1s"), errs: []string{
			`p.yaml:3:47: rules[0].limit.packets: "5MB" is not a packet count; use N, Nk, NM or NG (decimal: 1k = 1000)`}},
	})
}

func TestAggregate(t *testing.T) {
	level := func(key string) string {
		return "  - key: " + key + "\n        limit: {algorithm: token_bucket, rate: 1000/s, burst: 2000}"
	}
	runParseCases(t, []parseCase{
		{name: "levels in order", src: withRule("aggregate:", level("{ipv4_prefix: 24, ipv6_prefix: 48}"), level("global")),
			check: func(t *testing.T, p *Policy) {
				want := []Level{{srcKey, tb1000}, {Key{KeySrcIP, 24, 48}, tb1000}, {Key{Kind: KeyGlobal}, tb1000}}
				if got := rule0(t, p).Levels; !reflect.DeepEqual(got, want) {
					t.Fatalf("%+v", got)
				}
			}},
		{name: "three aggregates", src: withRule("aggregate:", level("global"), level("global"), level("global"))},
		{name: "four aggregates", src: withRule("aggregate:", level("global"), level("global"), level("global"), level("global")), errs: []string{
			"p.yaml:11:9: rules[0].aggregate[3]: at most 3 aggregate levels: the datapath applies 4 levels per rule, the rule's own and 3 aggregates"}},
		{name: "empty aggregate", src: withRule("aggregate: []")},
		{name: "aggregate missing key and limit", src: withRule("aggregate:", "  - {}"), errs: []string{
			"p.yaml:5:9: rules[0].aggregate[0]: key is required in an aggregate level, e.g. key: global",
			"p.yaml:5:9: rules[0].aggregate[0]: limit is required in an aggregate level"}},
		{name: "aggregate not a list", src: withRule("aggregate: {key: global}"), errs: []string{
			"p.yaml:4:16: rules[0].aggregate: expected a list of levels like [{key: global, limit: {...}}], got a mapping"}},
		{name: "aggregate bad limit", src: withRule("aggregate:", "  - key: global", "    limit: {algorithm: token_bucket, rate: 1/s, burst: 0}"), errs: []string{
			"p.yaml:6:60: rules[0].aggregate[0].limit.burst: burst must be 1 to 4294967296, got 0"}},
		{name: "aggregate port key", src: withRule("aggregate:", "  - key: src_ip+dst_port", "    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}"), errs: []string{
			"p.yaml:5:14: rules[0].aggregate[0].key: key src_ip+dst_port needs protocol tcp or udp in the rule's match (protocol is any)"}},
	})
}
