// SPDX-License-Identifier: Apache-2.0

package maps

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"github.com/xdplimit/xdplimit/gen"
)

// A limiter pinned by an xdplimit of another map layout cannot be adopted:
// this program reads its maps differently. What outlives the layout is
// read from the pinned maps through their own BTF, the key and value types
// the old program was built with, which the kernel keeps with each map:
// fields are found by name, so the reader does not depend on which layout wrote them,
// and a layout whose fields it cannot find is refused rather than misread.
// The bans and the bookkeeping carry over; the lists and rules come from the
// policy being applied; every source's state and the counters start afresh.

// Carried is what the pinned maps of another layout hand over to new ones.
type Carried struct {
	Layout     uint32
	AttachMode AttachMode
	Attached   time.Time
	NetnsIno   uint64
	ManualBans uint64
	// Bans are the table's slots in use, expired ones included (Restore
	// skips those that have ended by then).
	Bans []CarriedBan
}

// CarriedBan is one ban of the old table.
type CarriedBan struct {
	Prefix    netip.Prefix
	Origin    string // the banning rule's name, or OriginManual
	Reason    string
	ExpiresNs uint64 // on the monotonic clock, as the datapath's
	StartedNs uint64
	Dropped   uint64
	Shadow    bool
}

// PinnedLayout reads the layout version of pinned maps from their
// metadata: its first field in every layout, whatever the rest became; 0
// for maps never written.
func PinnedLayout(pinned map[string]*ebpf.Map) (uint32, error) {
	meta := pinned[gen.XdplimitMapXdplMeta]
	if meta == nil {
		return 0, errors.New("no pinned metadata")
	}
	buf := make([]byte, meta.ValueSize())
	if len(buf) < 4 {
		return 0, fmt.Errorf("pinned metadata of %d bytes is not xdplimit's", len(buf))
	}
	if err := meta.Lookup(uint32(0), buf); err != nil {
		return 0, fmt.Errorf("reading the pinned metadata: %w", err)
	}
	return binary.NativeEndian.Uint32(buf), nil
}

// ReadCarried reads what carries over from pinned maps of any layout: the
// metadata, the ban table and the rule names its bans refer to.
func ReadCarried(pinned map[string]*ebpf.Map) (Carried, error) {
	metaMap, bans, names := pinned[gen.XdplimitMapXdplMeta], pinned[banMap], pinned[gen.XdplimitMapXdplNames]
	if metaMap == nil {
		return Carried{}, errors.New("no pinned metadata")
	}
	var c Carried
	if err := c.readMeta(metaMap); err != nil {
		return Carried{}, err
	}
	if bans == nil {
		return c, nil // a layout from before bans
	}
	var err error
	if c.Bans, err = readBans(bans, names); err != nil {
		return Carried{}, err
	}
	return c, nil
}

func (c *Carried) readMeta(m *ebpf.Map) error {
	rec, err := recordOf(m, "xdpl_metadata")
	if err != nil {
		return err
	}
	buf := make([]byte, m.ValueSize())
	if err := m.Lookup(uint32(0), buf); err != nil {
		return fmt.Errorf("reading the pinned metadata: %w", err)
	}
	v, err := rec.uints(buf, "layout_version", "attach_mode", "attached_unix_ns", "netns_ino")
	if err != nil {
		return err
	}
	c.Layout, c.AttachMode, c.NetnsIno = uint32(v[0]), AttachMode(v[1]), v[3]
	if v[2] != 0 {
		c.Attached = time.Unix(0, int64(v[2]))
	}
	// Counted in the metadata since bans exist; 0 before.
	if n, err := rec.uints(buf, "manual_bans"); err == nil {
		c.ManualBans = n[0]
	}
	return nil
}

func readBans(bans, names *ebpf.Map) ([]CarriedBan, error) {
	rec, err := recordOf(bans, "xdpl_ban")
	if err != nil {
		return nil, err
	}
	// The ban's manual origin and shadow flag are constants of the
	// program, not of the map: each map's BTF has only its own types.
	// Neither has changed since bans exist.
	manual, shadow := uint64(banManual), uint64(bfShadow)
	ruleNames := map[uint64]string{}
	buf := make([]byte, bans.ValueSize())
	var out []CarriedBan
	for slot := range bans.MaxEntries() {
		if err := bans.Lookup(slot, buf); err != nil {
			return nil, fmt.Errorf("reading ban slot %d: %w", slot, err)
		}
		v, err := rec.uints(buf, "expires_ns", "started_ns", "dropped", "origin", "flags", "family", "prefixlen")
		if err != nil {
			return nil, err
		}
		if v[0] == 0 {
			continue // never used
		}
		addr, err := rec.bytes(buf, "addr")
		if err != nil {
			return nil, err
		}
		reason, err := rec.bytes(buf, "reason")
		if err != nil {
			return nil, err
		}
		p, ok := carriedPrefix(v[5], addr, v[6])
		if !ok {
			continue // a slot no datapath would match
		}
		b := CarriedBan{Prefix: p, Origin: OriginManual, Reason: cBytes(reason), ExpiresNs: v[0], StartedNs: v[1],
			Dropped: v[2], Shadow: v[4]&shadow != 0}
		if v[3] != manual {
			name, ok := ruleNames[v[3]]
			if !ok {
				name, err = carriedName(names, uint32(v[3]))
				if err != nil {
					return nil, err
				}
				ruleNames[v[3]] = name
			}
			b.Origin = name
		}
		out = append(out, b)
	}
	return out, nil
}

func carriedPrefix(family uint64, addr []byte, bits uint64) (netip.Prefix, bool) {
	switch {
	case family == 4 && len(addr) >= 4 && bits <= 32:
		return netip.PrefixFrom(netip.AddrFrom4([4]byte(addr[:4])), int(bits)).Masked(), true
	case family == 6 && len(addr) >= 16 && bits <= 128:
		return netip.PrefixFrom(netip.AddrFrom16([16]byte(addr[:16])), int(bits)).Masked(), true
	}
	return netip.Prefix{}, false
}

// carriedName is the rule name of a counter slot in the old names map ("" if
// there is none to read).
func carriedName(names *ebpf.Map, slot uint32) (string, error) {
	if names == nil {
		return "", nil
	}
	rec, err := recordOf(names, "xdpl_name")
	if err != nil {
		return "", err
	}
	buf := make([]byte, names.ValueSize())
	if err := names.Lookup(slot, buf); err != nil {
		return "", fmt.Errorf("reading rule name %d: %w", slot, err)
	}
	name, err := rec.bytes(buf, "name")
	if err != nil {
		return "", err
	}
	return cBytes(name), nil
}

// Restore writes carried bans that have not ended into this limiter's ban
// table, keeping their ends, start times and drop counts. A rule's ban
// keeps its rule when the policy in force has a rule of that name; else it
// becomes manual, its reason naming the rule. The old metadata's count of
// manual bans carries over, and the ban lookup is turned on when any ban
// went in. It returns how many went in. Call it after Apply, before the
// program meets traffic: it writes the control word.
func (l *Limiter) Restore(c Carried) (int, error) {
	now, err := l.now()
	if err != nil {
		return 0, err
	}
	slots, err := l.SlotNames()
	if err != nil {
		return 0, err
	}
	bySlot := map[string]uint16{}
	for slot, name := range slots {
		bySlot[name] = uint16(slot)
	}
	n := 0
	for _, cb := range c.Bans {
		if int64(cb.ExpiresNs-now) <= 0 {
			continue
		}
		b := gen.XdplimitXdplBan{ExpiresNs: cb.ExpiresNs, StartedNs: cb.StartedNs, Dropped: cb.Dropped, Origin: banManual}
		setBanPrefix(&b, CanonicalBanPrefix(cb.Prefix))
		reason := cb.Reason
		if cb.Origin != OriginManual {
			if slot, ok := bySlot[cb.Origin]; ok {
				b.Origin = slot
			} else if reason == "" {
				reason = "rule " + cb.Origin
			}
		}
		for i := 0; i < len(reason) && i < BanReasonLen; i++ {
			b.Reason[i] = int8(reason[i])
		}
		if cb.Shadow {
			b.Flags |= bfShadow
		}
		if _, err := l.put(&b, now); err != nil {
			return n, err
		}
		n++
	}
	m, err := l.Meta()
	if err != nil {
		return n, err
	}
	m.ManualBans = c.ManualBans
	if err := l.SetMeta(m); err != nil {
		return n, err
	}
	if n > 0 {
		return n, l.EnableBanLookup()
	}
	return n, nil
}

// record is a struct of the old program, its fields by name.
type record struct {
	name   string
	fields map[string][2]int // offset, size in bytes
}

// recordOf finds struct name, the value type of pinned map m, in the BTF
// the map was created with; its size must be the map's value size.
func recordOf(m *ebpf.Map, name string) (*record, error) {
	h, err := m.Handle()
	if err != nil {
		return nil, fmt.Errorf("the pinned maps carry no type information to read them by: %w", err)
	}
	defer h.Close()
	types, err := h.Spec(nil)
	if err != nil {
		return nil, fmt.Errorf("reading the pinned maps' type information: %w", err)
	}
	var st *btf.Struct
	if err := types.TypeByName(name, &st); err != nil {
		return nil, fmt.Errorf("struct %s in the pinned maps' types: %w", name, err)
	}
	if st.Size != m.ValueSize() {
		return nil, fmt.Errorf("struct %s is %d bytes, the map's values %d", name, st.Size, m.ValueSize())
	}
	r := &record{name: name, fields: map[string][2]int{}}
	for _, mb := range st.Members {
		if mb.BitfieldSize != 0 || mb.Offset%8 != 0 {
			continue // no field read here is a bit field
		}
		size, err := btf.Sizeof(mb.Type)
		if err != nil {
			continue
		}
		r.fields[mb.Name] = [2]int{int(mb.Offset / 8), size}
	}
	return r, nil
}

// bytes is field name of buf, a value of the record.
func (r *record) bytes(buf []byte, name string) ([]byte, error) {
	f, ok := r.fields[name]
	if !ok || f[0]+f[1] > len(buf) {
		return nil, fmt.Errorf("struct %s of the pinned maps has no field %s", r.name, name)
	}
	return buf[f[0] : f[0]+f[1]], nil
}

// uints reads integer fields of buf, in the machine's byte order.
func (r *record) uints(buf []byte, names ...string) ([]uint64, error) {
	out := make([]uint64, len(names))
	for i, name := range names {
		b, err := r.bytes(buf, name)
		if err != nil {
			return nil, err
		}
		switch len(b) {
		case 1:
			out[i] = uint64(b[0])
		case 2:
			out[i] = uint64(binary.NativeEndian.Uint16(b))
		case 4:
			out[i] = uint64(binary.NativeEndian.Uint32(b))
		case 8:
			out[i] = binary.NativeEndian.Uint64(b)
		default:
			return nil, fmt.Errorf("field %s.%s of %d bytes is not an integer", r.name, name, len(b))
		}
	}
	return out, nil
}

func cBytes(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// SizesOf sizes new maps as pinned ones of any layout were sized: the
// state tables, the sliding_log table and the ban table (0 for a table the
// pins lack).
func SizesOf(pinned map[string]*ebpf.Map) Options {
	var o Options
	size := func(name string) uint32 {
		if m := pinned[name]; m != nil {
			return m.MaxEntries()
		}
		return 0
	}
	o.MaxSources, o.MaxOtherSources, o.MaxLogs = size(Sources4Map), size(SourcesMap), size(LogsMap)
	// The IPv4 table of another layout may be a kernel LRU hash, whose
	// size is its keys, or the product's sets.
	if m := pinned[Sources4Map]; m != nil {
		o.MaxSources = Capacity4(m)
	}
	if o.MaxSources == 0 {
		o.MaxOtherSources, o.MaxLogs = 0, 0
	}
	o.MaxBans = size(banMap)
	return o
}
