// SPDX-License-Identifier: Apache-2.0

package maps

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/gen"
	"github.com/xdplimit/xdplimit/internal/termsafe"
)

// Bans: prefixes whose every packet is dropped until a time (bpf/bans.h).
// A rule with action ban starts them in the datapath; Ban and Unban are the
// operator's. The table is pinned with the other maps, so bans outlive the
// control plane, and the datapath ends them: nothing has to run.
const (
	// DefaultMaxBans is the ban table's size unless --max-bans says.
	DefaultMaxBans = uint32(1 << 16)
	// BanWays is the table's associativity: a rule's ban can replace only
	// one of the BanWays slots of its set.
	BanWays = uint32(gen.XdplimitXdplConstXDPL_BAN_WAYS)
	// MinBan and MaxBan bound a ban's duration.
	MinBan = time.Second
	MaxBan = 30 * 24 * time.Hour
	// BanReasonLen bounds a manual ban's reason, in bytes.
	BanReasonLen = int(gen.XdplimitXdplConstXDPL_BAN_REASON_LEN) - 1
	// OriginManual is a manual ban's origin.
	OriginManual = "manual"

	banManual = uint16(gen.XdplimitXdplConstXDPL_BAN_MANUAL)
	bfShadow  = uint8(gen.XdplimitXdplConstXDPL_BF_SHADOW)
	banMap    = gen.XdplimitMapXdplBans
)

// BanBytes is the memory one ban takes, at most: its slot, and two trie
// nodes (its own and at most one intermediate node), each ~60 bytes with
// key and value, 64 after the kernel's allocator rounds.
func BanBytes() uint64 {
	var b gen.XdplimitXdplBan
	return uint64(binary.Size(b)) + 2*64
}

// Ban is one ban in force.
type Ban struct {
	Prefix  netip.Prefix
	Origin  string // the banning rule's name, or OriginManual
	Reason  string
	Left    time.Duration // until it ends
	Dropped uint64        // packets dropped (counted, in shadow) while banned
	Shadow  bool          // recorded and counted, never enforced
}

// CheckMaxBans refuses a table size the datapath cannot index as sets.
func CheckMaxBans(n uint32) error {
	if n < BanWays || n&(n-1) != 0 {
		return fmt.Errorf("--max-bans %d: give a power of two, at least %d", n, BanWays)
	}
	return nil
}

// sizeBans sizes the ban table and its tries (room for races: twice).
func sizeBans(spec *ebpf.CollectionSpec, n uint32) {
	spec.Maps[banMap].MaxEntries = n
	spec.Maps[gen.XdplimitMapXdplBan4].MaxEntries = 2 * n
	spec.Maps[gen.XdplimitMapXdplBan6].MaxEntries = 2 * n
}

// BansCapacity is the ban table's size.
func (l *Limiter) BansCapacity() uint32 { return l.objs.XdplBans.MaxEntries() }

// now is the datapath's clock: the monotonic clock (ktime and the coarse
// clock both follow it), or the injected time.
func (l *Limiter) now() (uint64, error) {
	if l.clock == ClockMap {
		var t uint64
		err := l.objs.XdplClock.Lookup(uint32(0), &t)
		return t, err
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0, err
	}
	return uint64(ts.Nano()), nil
}

// slots reads the whole ban table, in one batch where the kernel can
// (a scrape reads it: one lookup per slot would take ~250 ms at 65536).
func (l *Limiter) slots() ([]gen.XdplimitXdplBan, error) {
	n := l.BansCapacity()
	out := make([]gen.XdplimitXdplBan, n)
	keys := make([]uint32, n)
	var cursor ebpf.MapBatchCursor
	got, err := l.objs.XdplBans.BatchLookup(&cursor, keys, out, nil)
	if err == nil || errors.Is(err, ebpf.ErrKeyNotExist) {
		if got == int(n) {
			ordered := make([]gen.XdplimitXdplBan, n)
			for i, k := range keys {
				ordered[k%n] = out[i]
			}
			return ordered, nil
		}
	}
	// Kernels without batch lookup of arrays: one slot at a time.
	var b gen.XdplimitXdplBan
	it := l.objs.XdplBans.Iterate()
	var k uint32
	for it.Next(&k, &b) {
		out[k] = b
	}
	return out, it.Err()
}

func live(b *gen.XdplimitXdplBan, now uint64) bool {
	return b.ExpiresNs != 0 && int64(b.ExpiresNs-now) > 0
}

func banPrefix(b *gen.XdplimitXdplBan) netip.Prefix {
	if b.Family == 4 {
		return netip.PrefixFrom(netip.AddrFrom4([4]byte(b.Addr[:4])), int(b.Prefixlen))
	}
	return netip.PrefixFrom(netip.AddrFrom16(b.Addr), int(b.Prefixlen))
}

// Bans lists the bans in force, in table order.
func (l *Limiter) Bans() ([]Ban, error) {
	now, err := l.now()
	if err != nil {
		return nil, err
	}
	slots, err := l.slots()
	if err != nil {
		return nil, fmt.Errorf("reading the ban table: %w", err)
	}
	var out []Ban
	for i := range slots {
		b := &slots[i]
		if !live(b, now) {
			continue
		}
		ban, err := l.banOf(b, now)
		if err != nil {
			return nil, err
		}
		out = append(out, ban)
	}
	return out, nil
}

// banOf is a live ban's slot as a Ban, its origin named.
func (l *Limiter) banOf(b *gen.XdplimitXdplBan, now uint64) (Ban, error) {
	origin := OriginManual
	if b.Origin != banManual {
		var err error
		if origin, err = l.name(uint32(b.Origin)); err != nil {
			return Ban{}, err
		}
	}
	return Ban{Prefix: banPrefix(b), Origin: origin, Reason: cString(b.Reason[:]),
		Left: time.Duration(b.ExpiresNs - now), Dropped: b.Dropped, Shadow: b.Flags&bfShadow != 0}, nil
}

func cString(s []int8) string {
	b := make([]byte, 0, len(s))
	for _, c := range s {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}

// anyBan says whether a trie holds a prefix: the datapath must then look.
func (l *Limiter) anyBan() (bool, error) {
	var k4 gen.XdplimitXdplBanKey4
	var k6 gen.XdplimitXdplBanKey6
	for _, q := range []struct {
		m *ebpf.Map
		k any
	}{{l.objs.XdplBan4, &k4}, {l.objs.XdplBan6, &k6}} {
		err := q.m.NextKey(nil, q.k)
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, ebpf.ErrKeyNotExist) {
			return false, err
		}
	}
	return false, nil
}

// CheckBan checks a ban's arguments before anything is written: a prefix,
// a duration from MinBan to MaxBan, and a reason that is printable as it
// is (termsafe.Clean: escape outside text first, termsafe.Clip) and fits
// the table. The ban table is read by every command and metric that prints
// a reason: none of them should find a control character there.
func CheckBan(p netip.Prefix, d time.Duration, reason string) error {
	if !p.IsValid() {
		return errors.New("not a prefix")
	}
	if d < MinBan || d > MaxBan {
		return fmt.Errorf("ban duration %v out of range: give %v to %v", d, MinBan, MaxBan)
	}
	if len(reason) > BanReasonLen {
		return fmt.Errorf("reason longer than %d bytes", BanReasonLen)
	}
	if !termsafe.Clean(reason) {
		return fmt.Errorf("reason %q holds control or other non-printable characters", reason)
	}
	return nil
}

// Ban bans prefix p (masked; an IPv4-mapped address counts as IPv4) by
// hand for d. A prefix already banned gets the new end and reason. The slot
// is a free one, else the one whose ban ends first (replaced: the table is
// full); replaced reports the prefix that lost its ban.
func (l *Limiter) Ban(p netip.Prefix, d time.Duration, reason string) (replaced netip.Prefix, err error) {
	res, err := l.BanAll([]BanRequest{{Prefix: p, For: d, Reason: reason}})
	if err != nil {
		return netip.Prefix{}, err
	}
	return res[0].Replaced, res[0].Err
}

// setBanPrefix writes a canonical prefix into a ban slot.
func setBanPrefix(b *gen.XdplimitXdplBan, p netip.Prefix) {
	b.Prefixlen = uint32(p.Bits())
	if p.Addr().Is4() {
		b.Family = 4
		a := p.Addr().As4()
		copy(b.Addr[:], a[:])
	} else {
		b.Family = 6
		b.Addr = p.Addr().As16()
	}
}

// put writes ban b as BanAll writes each of its bans, and moves the ban
// epoch, so that the flow caches forget what they learned without it.
func (l *Limiter) put(b *gen.XdplimitXdplBan, now uint64) (replaced netip.Prefix, err error) {
	slots, err := l.slots()
	if err != nil {
		return netip.Prefix{}, err
	}
	if replaced, err = l.putSlot(newSlotPicker(slots, now), b); err != nil {
		return netip.Prefix{}, err
	}
	return replaced, l.moveBanEpoch()
}

// CanonicalBanPrefix is the prefix a ban of p bans: p masked, and an
// IPv4-mapped IPv6 prefix of 96 bits or more as the IPv4 prefix it maps
// (::ffff:0.0.0.0/96 is 0.0.0.0/0), since the datapath looks IPv4 packets
// up in the IPv4 trie.
func CanonicalBanPrefix(p netip.Prefix) netip.Prefix {
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p.Masked()
}

// trieKey is the trie and key of a ban's prefix.
func (l *Limiter) trieKey(b *gen.XdplimitXdplBan) (*ebpf.Map, any) {
	if b.Family == 4 {
		return l.objs.XdplBan4, &gen.XdplimitXdplBanKey4{Prefixlen: b.Prefixlen, Addr: [4]byte(b.Addr[:4])}
	}
	return l.objs.XdplBan6, &gen.XdplimitXdplBanKey6{Prefixlen: b.Prefixlen, Addr: b.Addr}
}

func (l *Limiter) link(b *gen.XdplimitXdplBan, slot uint32) error {
	m, k := l.trieKey(b)
	if err := m.Update(k, slot, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("ban %v: %w", banPrefix(b), err)
	}
	return nil
}

func (l *Limiter) unlink(b *gen.XdplimitXdplBan) error {
	m, k := l.trieKey(b)
	if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("unban %v: %w", banPrefix(b), err)
	}
	return nil
}

// Unban ends the ban of exactly prefix p; false when p was not banned.
func (l *Limiter) Unban(p netip.Prefix) (bool, error) {
	ended, err := l.UnbanAll([]netip.Prefix{p})
	return len(ended) == 1 && ended[0], err
}

// UnbanAll ends the bans of exactly the prefixes ps, as Unban ends one,
// reading the table once (a feed may end thousands at once). ended[i] says
// whether ps[i] was banned; after an error, some of them may be unbanned.
func (l *Limiter) UnbanAll(ps []netip.Prefix) (ended []bool, err error) {
	l.banMu.Lock()
	defer l.banMu.Unlock()
	want := make(map[netip.Prefix]int, len(ps))
	for i, p := range ps {
		if !p.IsValid() {
			return nil, fmt.Errorf("unban %v: not a prefix", p)
		}
		want[CanonicalBanPrefix(p)] = i
	}
	ended = make([]bool, len(ps))
	now, err := l.now()
	if err != nil {
		return ended, err
	}
	slots, err := l.slots()
	if err != nil {
		return ended, err
	}
	for i := range slots {
		b := &slots[i]
		if b.ExpiresNs == 0 {
			continue
		}
		j, ok := want[banPrefix(b)]
		if !ok {
			continue
		}
		ended[j] = ended[j] || live(b, now)
		if err := l.unlink(b); err != nil {
			return ended, err
		}
		if err := l.objs.XdplBans.Update(uint32(i), &gen.XdplimitXdplBan{}, ebpf.UpdateAny); err != nil {
			return ended, err
		}
	}
	return ended, nil
}

// EnableBanLookup makes both generations look the ban table up (the
// datapath skips it otherwise). It rewrites the control word, so only
// while no attach process runs: one that does re-applies its policy
// instead (SIGHUP), and Apply sets the flag while a trie holds a prefix.
func (l *Limiter) EnableBanLookup() error {
	l.ctlMu.Lock()
	defer l.ctlMu.Unlock()
	_, ctl, err := l.active()
	if err != nil {
		return err
	}
	if ctl.Gen[0].Flags&gfBans != 0 && ctl.Gen[1].Flags&gfBans != 0 {
		return nil
	}
	ctl.Gen[0].Flags |= gfBans
	ctl.Gen[1].Flags |= gfBans
	// What the flow caches learned without the ban table is void.
	seq := nextSeq(&ctl)
	ctl.Gen[0].Seq, ctl.Gen[1].Seq = seq, seq+1
	return l.objs.XdplCtl.Update(uint32(0), &ctl, ebpf.UpdateAny)
}

// countManualBans counts n bans made outside the datapath in the metadata
// (for the bans started metric; the datapath counts the rules' own).
func (l *Limiter) countManualBans(n uint64) error {
	m, err := l.Meta()
	if err != nil {
		return err
	}
	m.ManualBans += n
	return l.SetMeta(m)
}

// BanLookupOn says whether the generation in force looks bans up.
func (l *Limiter) BanLookupOn() (bool, error) {
	g, ctl, err := l.active()
	if err != nil {
		return false, err
	}
	return ctl.Gen[g].Flags&gfBans != 0, nil
}
