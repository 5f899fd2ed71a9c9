// SPDX-License-Identifier: Apache-2.0

package fleet

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/xdplimit/xdplimit/maps"
)

// level is one fleet level in force, as the engine needs it.
type level struct {
	maps.FleetLevel
	// name is the level's name in Redis keys: the same on every host that
	// runs the same rule with the same limit, and different as soon as the
	// limit differs (hosts mid-rollout must not mix two limits' state).
	name string
	// token_bucket: the emission interval per unit, in us (for Redis) and
	// in the datapath's time units (1/16 ns, for the fold).
	intervalUs float64
	intervalTU uint64
	tolUs      float64 // token_bucket: the tolerance (burst) in us
	ttlMs      int64
}

// newLevel derives what the engine needs from a level in force.
func newLevel(fl maps.FleetLevel) level {
	h := sha256.New()
	var b [8]byte
	for _, v := range []uint64{uint64(fl.Algorithm), uint64(fl.KeyKind), fl.P1, fl.P2,
		uint64(fl.Mask4), uint64(fl.Mask6[0]), uint64(fl.Mask6[1]), uint64(fl.Mask6[2]),
		uint64(fl.Mask6[3]), b2u(fl.Bytes)} {
		binary.LittleEndian.PutUint64(b[:], v)
		h.Write(b[:])
	}
	lv := level{FleetLevel: fl}
	lv.name = fmt.Sprintf("%s/%d/%s", fl.Rule, fl.Origin, hex.EncodeToString(h.Sum(nil)[:6]))
	switch fl.Algorithm {
	case maps.AlgTokenBucket:
		lv.intervalUs = float64(fl.P1) / float64(uint64(1)<<maps.FPShift) / 1e3
		lv.intervalTU = fl.P1 >> (maps.FPShift - maps.TimeShift)
		lv.tolUs = float64(fl.P2>>maps.TimeShift) / 1e3
		// An idle key is kept for its tolerance and a second more: after
		// that its bucket is full and Redis has nothing to remember.
		lv.ttlMs = int64(fl.P2>>maps.TimeShift)/1e6 + 1000
	case maps.AlgFixedWindow:
		lv.ttlMs = 2*int64(fl.P1)/1e6 + 1000
	}
	return lv
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// label names the level in metrics: its rule and its place in the rule.
func (lv *level) label() string { return lv.Rule + "/" + strconv.Itoa(lv.Origin) }

// redisKey is the key of one state entry in Redis. The braces are a hash
// tag: a Redis Cluster places each level-and-key by itself, so the keys of
// a level spread over every shard.
func (lv *level) redisKey(ns string, k maps.FleetKey) string {
	return "xdpl:" + ns + ":{" + lv.name + "|" + keyString(k, lv.Global) + "}"
}

func keyString(k maps.FleetKey, global bool) string {
	if global {
		return "global"
	}
	var a netip.Addr
	if k.Family == 4 {
		a = netip.AddrFrom4([4]byte(k.Addr[:4]))
	} else {
		a = netip.AddrFrom16(k.Addr)
	}
	if k.Port != 0 {
		return a.String() + "#" + strconv.Itoa(int(k.Port))
	}
	return a.String()
}
