// SPDX-License-Identifier: Apache-2.0

package fleet

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	xmaps "github.com/xdplimit/xdplimit/maps"
)

// The fleet's stream of keys that crossed their share somewhere
// (xdpl:NAMESPACE:hot): a host adds the keys it saw cross, and reads what
// the others added since its last read. Anyone who can write the fleet's
// Redis can add to it; an entry can only put a key of a level this host
// runs in the exchange (stricter, never looser), and a sync reads a
// bounded number of entries.
const (
	streamMaxLen  = 100_000 // entries the stream keeps (approximately)
	streamReadMax = 20_000  // entries a sync reads
	memberMaxLen  = 300
)

// announce is a sync's part of the stream.
type announce struct {
	key     string
	members []string // to add
	cursor  string   // read entries after this ID; "" the first time
	holdMs  int64    // the first read starts this far before the newest entry
	// out
	read []redis.XMessage
	last string // the ID of the newest entry seen
	err  error
}

func (a *announce) queue(ctx context.Context, pipe redis.Pipeliner) int {
	for _, m := range a.members {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: a.key, MaxLen: streamMaxLen, Approx: true, Values: []string{"k", m}})
	}
	if a.cursor == "" {
		pipe.XRevRangeN(ctx, a.key, "+", "-", 1)
	} else {
		pipe.XRangeN(ctx, a.key, "("+a.cursor, "+", streamReadMax)
	}
	return len(a.members) + 1
}

// settle reads the answers of the commands queue added.
func (a *announce) settle(cmds []redis.Cmder) {
	for _, c := range cmds[:len(a.members)] {
		if err := c.Err(); err != nil {
			a.err = err
		}
	}
	msgs, err := cmds[len(a.members)].(*redis.XMessageSliceCmd).Result()
	if err != nil {
		a.err = err
		return
	}
	if a.cursor == "" {
		// The first read: from a hold before the newest entry.
		a.last = "0-0"
		if len(msgs) == 1 {
			if ms, ok := streamMs(msgs[0].ID); ok {
				a.last = strconv.FormatInt(max(ms-a.holdMs, 0), 10) + "-0"
			}
		}
		return
	}
	a.read, a.last = msgs, a.cursor
	if len(msgs) > 0 {
		a.last = msgs[len(msgs)-1].ID
	}
}

func streamMs(id string) (int64, bool) {
	ms, _, ok := strings.Cut(id, "-")
	v, err := strconv.ParseInt(ms, 10, 64)
	return v, ok && err == nil && v >= 0
}

var errBadEntry = errors.New("not a key of this fleet's levels")

// parseMember reads "LEVEL|KEY" back into a state entry's key, for the
// levels in force (by their Redis names).
func parseMember(m string, byName map[string]*level) (xmaps.FleetKey, error) {
	if len(m) > memberMaxLen {
		return xmaps.FleetKey{}, fmt.Errorf("%w: %d bytes", errBadEntry, len(m))
	}
	i := strings.LastIndexByte(m, '|')
	if i < 0 {
		return xmaps.FleetKey{}, errBadEntry
	}
	lv := byName[m[:i]]
	if lv == nil {
		return xmaps.FleetKey{}, errBadEntry // a level this host does not run
	}
	k := xmaps.FleetKey{StateID: lv.StateID}
	rest := m[i+1:]
	if lv.Global {
		if rest != "global" {
			return k, errBadEntry
		}
		return k, nil
	}
	addr, port, hasPort := strings.Cut(rest, "#")
	a, err := netip.ParseAddr(addr)
	if err != nil || a.Zone() != "" {
		return k, fmt.Errorf("%w: address %q", errBadEntry, addr)
	}
	if hasPort {
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil || p == 0 {
			return k, fmt.Errorf("%w: port %q", errBadEntry, port)
		}
		k.Port = uint16(p)
	}
	if a.Is4() {
		k.Family = 4
		a4 := a.As4()
		copy(k.Addr[:], a4[:])
	} else {
		k.Family = 6
		k.Addr = a.As16()
	}
	if keyString(k, false) != rest {
		return k, fmt.Errorf("%w: %q is not as this host writes it", errBadEntry, rest)
	}
	return k, nil
}

// heardKeys are the keys of the entries read; entries that name no key
// of the levels in force are skipped.
func (e *Engine) heardKeys(msgs []redis.XMessage) []xmaps.FleetKey {
	byName := make(map[string]*level, len(e.levels))
	for _, lv := range e.levels {
		byName[lv.name] = lv
	}
	var out []xmaps.FleetKey
	for _, msg := range msgs {
		m, ok := msg.Values["k"].(string)
		if !ok {
			continue
		}
		if k, err := parseMember(m, byName); err == nil {
			out = append(out, k)
		}
	}
	return out
}
