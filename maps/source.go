// SPDX-License-Identifier: Apache-2.0

package maps

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/gen"
	"github.com/xdplimit/xdplimit/model"
)

// What the limiter holds for one address, read from the maps in force
// with a few lookups, whatever the size of the tables: the operator's
// "what does the limiter think of this address, right now?"
// (`xdplimit status --source`, GET /v1/sources/ADDR).

// Source is what the limiter holds for one address now.
type Source struct {
	Address netip.Addr
	// Port is the port the keys with a port were read for (0: none given).
	Port uint16
	// List is SourceAllowed or SourceDenied when the allow or deny list
	// decides the address (its longest matching prefix there), else "".
	List string
	// Bans are the bans in force that cover the address, longest prefix
	// first (the first is the one that drops its packets).
	Bans []Ban
	// Rules are the rules whose match the address can meet, in policy
	// order: those whose source prefixes hold it (or that name none) and
	// whose protocol its family can carry. Which of them a packet meets
	// first depends on the fields in Undecided.
	Rules []SourceRule
	// Undecided names the match fields the rules in force read that an
	// address alone does not decide, in the policy's words.
	Undecided []string
	// Now is the datapath's clock when the state was read, in ns.
	Now uint64
}

// The allow and deny lists, as Source.List names them.
const (
	SourceAllowed = "allow"
	SourceDenied  = "deny"
)

// SourceRule is a rule an address can match, and its levels' state for it.
type SourceRule struct {
	Name  string
	Index int // in the policy
	// Action is what a packet over the limit gets: drop, shadow, ban,
	// syncookie or reject.
	Action string
	Levels []SourceLevel // in policy order
}

// SourceLevel is one level of a rule, for one address.
type SourceLevel struct {
	Origin    int    // the level's place in the policy: 0 the rule's own limit, then its aggregates
	Key       string // global, src_ip, src_ip+dst_port or src_ip+src_port
	Algorithm string // token_bucket, fixed_window, sliding_window or sliding_log
	Bytes     bool   // the limit counts bytes, not packets
	// Prefix is the source prefix the key holds (invalid for global).
	Prefix netip.Prefix
	// Known: the key's state was read. A key with a port is one state per
	// port: unknown without one.
	Known bool
	// Tracked: the key has a state entry (a global level always has).
	// An untracked key is read as a fresh one; while the admission sketch
	// applies (Sketch), its packets pass this level uncharged until it
	// has sent a few in a sketch epoch.
	Tracked bool
	Sketch  bool
	// Budget is what the state allows now (model.Budget: limit,
	// remaining, the time until the next admission and until it is
	// whole).
	model.Budget
}

// Source reads what the limiter holds for addr: the lists and bans that
// cover it, and for every rule it can match the state of each level's key
// (the keys with a port for port, when not 0). It reads the generation in
// force and never walks a table.
func (l *Limiter) Source(addr netip.Addr, port uint16) (Source, error) {
	addr = addr.Unmap()
	s := Source{Address: addr, Port: port}
	if !addr.IsValid() {
		return s, errors.New("not an address")
	}
	g, ctl, err := l.active()
	if err != nil {
		return s, err
	}
	cfg := ctl.Gen[g]
	if s.Now, err = l.now(); err != nil {
		return s, err
	}
	if cfg.Flags&gfACL != 0 {
		if s.List, err = l.listOf(g, addr); err != nil {
			return s, fmt.Errorf("allow/deny lists: %w", err)
		}
	}
	if s.Bans, err = l.bansOf(addr, s.Now); err != nil {
		return s, fmt.Errorf("bans: %w", err)
	}
	gc, err := l.generationOf(g, ctl)
	if err != nil {
		return s, err
	}
	matching, err := l.rulesOf(g, cfg, gc, addr)
	if err != nil {
		return s, err
	}
	rules := gc.rules
	trackAfter := l.trackAfter
	if trackAfter == 0 {
		trackAfter = DefaultTrackAfter // an attached program's: no attach option changes it
	}
	for i, r := range rules {
		if matching.W[i/64]&(1<<(i%64)) == 0 {
			continue
		}
		sr := SourceRule{Name: r.name, Index: i, Action: actionOf(r.flags, cfg.Flags)}
		for _, lv := range r.levels {
			sl, err := l.sourceLevel(lv, addr, port, s.Now, trackAfter)
			if err != nil {
				return s, fmt.Errorf("rule %s: %w", r.name, err)
			}
			sr.Levels = append(sr.Levels, sl)
		}
		// The levels are stored in evaluation order: back to the policy's.
		slices.SortFunc(sr.Levels, func(a, b SourceLevel) int { return a.Origin - b.Origin })
		s.Rules = append(s.Rules, sr)
	}
	s.Undecided = undecided(cfg.Dims)
	return s, nil
}

// actionOf names a rule's action from its flags and its generation's.
func actionOf(rflags uint8, gflags uint32) string {
	switch {
	case rflags&rfShadow != 0 || gflags&gfShadow != 0:
		return "shadow"
	case rflags&rfBan != 0:
		return "ban"
	case rflags&rfSynCookie != 0:
		return "syncookie"
	case rflags&rfReject != 0:
		return "reject"
	}
	return "drop"
}

// undecided names the match fields of dims an address does not decide.
func undecided(dims uint32) []string {
	var out []string
	for _, d := range []struct {
		dim  uint32
		name string
	}{
		{DimProto, "protocol"}, {DimDport, "dst_ports"}, {DimSport, "src_ports"}, {DimDst, "dst_cidrs"},
		{DimTCPFlags, "tcp_flags"}, {DimVLAN, "vlans"}, {DimLen, "length"}, {DimTTL, "ttl"},
		{DimTOS, "dscp"}, {DimICMPType | DimICMPCode, "icmp"}, {DimPayload, "payload"},
	} {
		if dims&d.dim != 0 {
			out = append(out, d.name)
		}
	}
	return out
}

// words4 and words16 are an address as the datapath holds it: network
// order bytes read as native-endian words.
func words4(a netip.Addr) uint32 {
	b := a.As4()
	return binary.NativeEndian.Uint32(b[:])
}

func words16(a netip.Addr) [4]uint32 {
	b := a.As16()
	var w [4]uint32
	for i := range w {
		w[i] = binary.NativeEndian.Uint32(b[4*i:])
	}
	return w
}

// listOf is the allow/deny list entry that decides addr in generation g:
// a host entry, else the longest prefix of the tries.
func (l *Limiter) listOf(g uint32, addr netip.Addr) (string, error) {
	var v uint32
	var err error
	if addr.Is4() {
		err = l.objs.XdplAcl4Hosts.Lookup(&gen.XdplimitXdplHost4{Gen: g, Addr: words4(addr)}, &v)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			err = l.objs.XdplAcl4.Lookup(&gen.XdplimitXdplLpm4{Prefixlen: 8 + 32, Gen: uint8(g), Addr: addr.As4()}, &v)
		}
	} else {
		err = l.objs.XdplAcl6Hosts.Lookup(&gen.XdplimitXdplHost6{Gen: g, Addr: words16(addr)}, &v)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			err = l.objs.XdplAcl6.Lookup(&gen.XdplimitXdplLpm6{Prefixlen: 8 + 128, Gen: uint8(g), Addr: addr.As16()}, &v)
		}
	}
	switch {
	case errors.Is(err, ebpf.ErrKeyNotExist):
		return "", nil
	case err != nil:
		return "", err
	case v == aclAllow:
		return SourceAllowed, nil
	case v == aclDeny:
		return SourceDenied, nil
	}
	return "", nil
}

// bansOf lists the live bans covering addr, longest prefix first: each
// trie lookup finds the longest banned prefix up to a length, the next one
// looks below that prefix's length.
func (l *Limiter) bansOf(addr netip.Addr, now uint64) ([]Ban, error) {
	var out []Ban
	for plen := addr.BitLen(); plen >= 0; {
		var slot uint32
		var err error
		if addr.Is4() {
			err = l.objs.XdplBan4.Lookup(&gen.XdplimitXdplBanKey4{Prefixlen: uint32(plen), Addr: addr.As4()}, &slot)
		} else {
			err = l.objs.XdplBan6.Lookup(&gen.XdplimitXdplBanKey6{Prefixlen: uint32(plen), Addr: addr.As16()}, &slot)
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			break
		}
		if err != nil {
			return nil, err
		}
		var b gen.XdplimitXdplBan
		if err := l.objs.XdplBans.Lookup(slot, &b); err != nil {
			return nil, err
		}
		// A slot a race re-used, or a length the trie does not hold: stop
		// rather than loop.
		if int(b.Prefixlen) > plen || !banPrefix(&b).Contains(addr) {
			break
		}
		if live(&b, now) {
			ban, err := l.banOf(&b, now)
			if err != nil {
				return nil, err
			}
			out = append(out, ban)
		}
		plen = int(b.Prefixlen) - 1
	}
	return out, nil
}
