package maps

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"strings"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/gen"
)

// Options for loading the limiter.
type Options struct {
	// MaxSources sizes the IPv4 per-source state table (0: the program's
	// default); MaxOtherSources the table of every other key (IPv6
	// sources and prefixes, src_ip+dst_port, global; 0: MaxSources / 4).
	MaxSources      uint32
	MaxOtherSources uint32
	Clock           Clock
	// Pinned maps to reuse instead of creating new ones (adopting the
	// state of a running limiter), by map name.
	Pinned map[string]*ebpf.Map
	// SampleOneIn samples one in this many dropped packets for top (a
	// power of two; 0 means 64).
	SampleOneIn uint32
	// BenchRotate (benchmarks only) makes the program rewrite the IPv4
	// source of each test-run buffer to the next of BenchRotate addresses
	// from BenchBase (a power of two; 0 = off).
	BenchRotate uint32
	BenchBase   netip.Addr
	// Record makes the program record each packet's decision, read with
	// LastDecision (pcap replay; costs a map write per packet).
	Record bool
	// TrackAfter: a key missing from the state table gets an entry once
	// this CPU has seen it this many times within one 16.8 ms sketch epoch (0 means 2; 1
	// tracks every key at its first packet). See docs/design.md.
	TrackAfter uint32
}

// Limiter is the loaded (not necessarily attached) XDP program and its maps.
type Limiter struct {
	objs       gen.XdplimitObjects
	clock      Clock
	tickNs     uint64
	trackAfter uint32
}

// MapNames lists every map of the limiter, the unit of pinning.
var MapNames = []string{
	gen.XdplimitMapXdplAcl4, gen.XdplimitMapXdplAcl6, gen.XdplimitMapXdplClock,
	gen.XdplimitMapXdplCounters, gen.XdplimitMapXdplCtl, gen.XdplimitMapXdplDport,
	gen.XdplimitMapXdplDst4, gen.XdplimitMapXdplDst6, gen.XdplimitMapXdplMeta,
	gen.XdplimitMapXdplNames, gen.XdplimitMapXdplProto, gen.XdplimitMapXdplRules,
	gen.XdplimitMapXdplSources, gen.XdplimitMapXdplSport, gen.XdplimitMapXdplSrc4,
	gen.XdplimitMapXdplSrc6, gen.XdplimitMapXdplStats, gen.XdplimitMapXdplTcpf,
	gen.XdplimitMapXdplVlan, gen.XdplimitMapXdplDrops, gen.XdplimitMapXdplLast,
	gen.XdplimitMapXdplSketchMap, gen.XdplimitMapXdplSources4, gen.XdplimitMapXdplGlobals,
	gen.XdplimitMapXdplUnparsedCfgs, gen.XdplimitMapXdplUnparsedCounts, gen.XdplimitMapXdplUnparsedState,
}

// The state tables: per-source IPv4 keys, and every other key.
const (
	Sources4Map = gen.XdplimitMapXdplSources4
	SourcesMap  = gen.XdplimitMapXdplSources
)

// CoarseTick is the resolution of the kernel's coarse monotonic clock (the
// scheduler tick), which decides the levels that need the fine clock.
func CoarseTick() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGetres(unix.CLOCK_MONOTONIC_COARSE, &ts); err != nil || ts.Nano() <= 0 {
		return uint64(4 * time.Millisecond) // HZ=250, the common case
	}
	return uint64(ts.Nano())
}

// Load loads the program and creates (or adopts) its maps.
func Load(opts Options) (*Limiter, error) {
	spec, err := gen.LoadXdplimit()
	if err != nil {
		return nil, fmt.Errorf("reading the embedded program: %w", err)
	}
	if opts.MaxSources > 0 {
		spec.Maps[Sources4Map].MaxEntries = opts.MaxSources
		spec.Maps[SourcesMap].MaxEntries = max(opts.MaxSources/4, 1)
	}
	if opts.MaxOtherSources > 0 {
		spec.Maps[SourcesMap].MaxEntries = opts.MaxOtherSources
	}
	spec.Maps[sketchMap].MaxEntries = sketchCells()
	if err := checkPinnedLayout(opts.Pinned); err != nil {
		return nil, err
	}
	sizeFromPinned(spec, opts.Pinned)
	if err := setConstants(spec, opts); err != nil {
		return nil, err
	}
	l := &Limiter{clock: opts.Clock, tickNs: CoarseTick(), trackAfter: opts.TrackAfter}
	if l.trackAfter == 0 {
		l.trackAfter = DefaultTrackAfter
	}
	err = spec.LoadAndAssign(&l.objs, &ebpf.CollectionOptions{MapReplacements: opts.Pinned})
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return nil, fmt.Errorf("the kernel's verifier rejected the program: %+v", ve)
	}
	if err != nil {
		return nil, fmt.Errorf("loading the program: %w", err)
	}
	meta, err := l.Meta()
	if err != nil {
		l.Close()
		return nil, err
	}
	switch meta.LayoutVersion {
	case 0: // new maps
		meta.LayoutVersion = LayoutVersion
		meta.NextStateId = 1
		meta.ClockMode = uint32(opts.Clock)
		meta.TickNs = l.tickNs
		if err := l.SetMeta(meta); err != nil {
			l.Close()
			return nil, err
		}
		if err := l.seedSampler(); err != nil {
			l.Close()
			return nil, err
		}
	case LayoutVersion:
	default:
		l.Close()
		return nil, fmt.Errorf("pinned maps have layout version %d, this xdplimit reads %d: detach first",
			meta.LayoutVersion, LayoutVersion)
	}
	return l, nil
}

// checkPinnedLayout refuses pinned maps of another layout before anything
// tries to use them: a map whose value changed size between layouts (the
// sketch's, in layout 3) would otherwise fail to load with the kernel's
// words for it, which do not say what to do.
func checkPinnedLayout(pinned map[string]*ebpf.Map) error {
	m, ok := pinned[gen.XdplimitMapXdplMeta]
	if !ok {
		return nil
	}
	// Raw bytes: the layout version is the first field in every layout,
	// whatever the rest of the metadata became.
	buf := make([]byte, m.ValueSize())
	if len(buf) < 4 {
		return fmt.Errorf("pinned metadata of %d bytes is not xdplimit's: detach first", len(buf))
	}
	if err := m.Lookup(uint32(0), buf); err != nil {
		return fmt.Errorf("reading the pinned metadata: %w", err)
	}
	if v := binary.NativeEndian.Uint32(buf); v != 0 && v != LayoutVersion {
		return fmt.Errorf("pinned maps have layout version %d, this xdplimit reads %d: detach first", v, LayoutVersion)
	}
	return nil
}

// sizeFromPinned gives the spec the size of a pinned state table: an adopted
// or inspected table keeps the size it was attached with (--max-sources);
// resizing needs a detach.
func sizeFromPinned(spec *ebpf.CollectionSpec, pinned map[string]*ebpf.Map) {
	for _, name := range []string{Sources4Map, SourcesMap, sketchMap} {
		if m, ok := pinned[name]; ok {
			spec.Maps[name].MaxEntries = m.MaxEntries()
		}
	}
}

func setConstants(spec *ebpf.CollectionSpec, opts Options) error {
	sample := opts.SampleOneIn
	if sample == 0 {
		sample = 64
	}
	if sample&(sample-1) != 0 || opts.BenchRotate&(opts.BenchRotate-1) != 0 {
		return fmt.Errorf("sample rate 1/%d and bench rotation %d must be powers of two", sample, opts.BenchRotate)
	}
	var base uint32
	if opts.BenchBase.Is4() {
		b := opts.BenchBase.As4()
		base = binary.NativeEndian.Uint32(b[:])
	}
	trackAfter := opts.TrackAfter
	if trackAfter == 0 {
		trackAfter = DefaultTrackAfter
	}
	var seed [8]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return err
	}
	if err := spec.Variables["xdpl_sketch_seed"].Set(binary.NativeEndian.Uint64(seed[:])); err != nil {
		return err
	}
	// The width follows the map's size: an adopted sketch keeps its own.
	width := spec.Maps[sketchMap].MaxEntries / uint32(ebpf.MustPossibleCPU()) / uint32(gen.XdplimitXdplConstXDPL_SKETCH_ROWS)
	if width == 0 || width&(width-1) != 0 {
		return fmt.Errorf("sketch of %d cells does not fit %d CPUs", spec.Maps[sketchMap].MaxEntries, ebpf.MustPossibleCPU())
	}
	for name, v := range map[string]uint32{
		"xdpl_sketch_width_mask": width - 1,
		"xdpl_track_after":       trackAfter,
		"xdpl_clock_mode":        uint32(opts.Clock),
		"xdpl_sample_mask":       sample - 1,
		"xdpl_bench_rotate":      opts.BenchRotate,
		"xdpl_bench_base":        base,
		"xdpl_record":            b2u(opts.Record),
	} {
		if err := spec.Variables[name].Set(v); err != nil {
			return fmt.Errorf("setting %s: %w", name, err)
		}
	}
	// The coarse clock counts jiffies; this is how many ns each one is.
	if err := spec.Variables["xdpl_tick_ns"].Set(CoarseTick()); err != nil {
		return fmt.Errorf("setting xdpl_tick_ns: %w", err)
	}
	return nil
}

const sketchMap = gen.XdplimitMapXdplSketchMap

// sketchBudget bounds the admission sketch's memory (an array of 8-byte
// elements, XDPL_SKETCH_ROWS rows per CPU).
const sketchBudget = 32 << 20

// sketchWidth is the cells per row per CPU: as wide as the budget allows on
// this machine, up to XDPL_SKETCH_MAX_WIDTH. A wide sketch keeps count-min
// collisions rare even when a spoofed flood brings ~5M new keys a second to
// one CPU (~80k per 16.8 ms epoch): 0.3-0.9% of them tracked early with four
// rows of 256k cells, 3-5% with two (docs/design.md).
func sketchWidth(cpus int) uint32 {
	w := uint32(gen.XdplimitXdplConstXDPL_SKETCH_MAX_WIDTH)
	rows := uint32(gen.XdplimitXdplConstXDPL_SKETCH_ROWS)
	for w > 2048 && uint64(w)*uint64(rows)*8*uint64(cpus) > sketchBudget {
		w /= 2
	}
	return w
}

func sketchCells() uint32 {
	cpus := ebpf.MustPossibleCPU()
	return uint32(cpus) * uint32(gen.XdplimitXdplConstXDPL_SKETCH_ROWS) * sketchWidth(cpus)
}

// DefaultTrackAfter is the sketch threshold: a source's second packet
// within a second creates its state entry.
const DefaultTrackAfter = 2

func b2u(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// seedSampler gives each CPU's drop sampler a random, non-zero xorshift
// state (zero would stay zero and sample every drop).
func (l *Limiter) seedSampler() error {
	rings := make([]gen.XdplimitXdplDropRing, ebpf.MustPossibleCPU())
	for i := range rings {
		var b [4]byte
		for binary.NativeEndian.Uint32(b[:]) == 0 {
			if _, err := rand.Read(b[:]); err != nil {
				return err
			}
		}
		rings[i].Rng = binary.NativeEndian.Uint32(b[:])
	}
	return l.objs.XdplDrops.Update(uint32(0), rings, ebpf.UpdateAny)
}

// Program is the XDP program.
func (l *Limiter) Program() *ebpf.Program { return l.objs.XdplMain }

// Clock is the time source the program was loaded with.
func (l *Limiter) Clock() Clock { return l.clock }

// Map returns one map by name (for pinning and adoption).
func (l *Limiter) Map(name string) *ebpf.Map {
	m := l.objs.XdplimitMaps
	return map[string]*ebpf.Map{
		gen.XdplimitMapXdplAcl4: m.XdplAcl4, gen.XdplimitMapXdplAcl6: m.XdplAcl6,
		gen.XdplimitMapXdplClock: m.XdplClock, gen.XdplimitMapXdplCounters: m.XdplCounters,
		gen.XdplimitMapXdplCtl: m.XdplCtl, gen.XdplimitMapXdplDport: m.XdplDport,
		gen.XdplimitMapXdplDst4: m.XdplDst4, gen.XdplimitMapXdplDst6: m.XdplDst6,
		gen.XdplimitMapXdplMeta: m.XdplMeta, gen.XdplimitMapXdplNames: m.XdplNames,
		gen.XdplimitMapXdplProto: m.XdplProto, gen.XdplimitMapXdplRules: m.XdplRules,
		gen.XdplimitMapXdplSources: m.XdplSources, gen.XdplimitMapXdplSport: m.XdplSport,
		gen.XdplimitMapXdplSrc4: m.XdplSrc4, gen.XdplimitMapXdplSrc6: m.XdplSrc6,
		gen.XdplimitMapXdplStats: m.XdplStats, gen.XdplimitMapXdplTcpf: m.XdplTcpf,
		gen.XdplimitMapXdplVlan: m.XdplVlan, gen.XdplimitMapXdplDrops: m.XdplDrops,
		gen.XdplimitMapXdplLast: m.XdplLast, gen.XdplimitMapXdplSketchMap: m.XdplSketchMap,
		gen.XdplimitMapXdplSources4: m.XdplSources4, gen.XdplimitMapXdplGlobals: m.XdplGlobals,
		gen.XdplimitMapXdplUnparsedCfgs: m.XdplUnparsedCfgs, gen.XdplimitMapXdplUnparsedCounts: m.XdplUnparsedCounts,
		gen.XdplimitMapXdplUnparsedState: m.XdplUnparsedState,
	}[name]
}

// Close releases the program and map file descriptors. Pinned objects and
// an attached link keep the datapath running.
func (l *Limiter) Close() error { return l.objs.Close() }

// SetClock sets the injected time (ClockMap only).
func (l *Limiter) SetClock(ns uint64) error {
	return l.objs.XdplClock.Update(uint32(0), ns, ebpf.UpdateAny)
}

// Meta is the control plane's bookkeeping stored next to the maps.
type Meta = gen.XdplimitXdplMetadata

func (l *Limiter) Meta() (Meta, error) {
	var m Meta
	err := l.objs.XdplMeta.Lookup(uint32(0), &m)
	return m, err
}

func (l *Limiter) SetMeta(m Meta) error {
	return l.objs.XdplMeta.Update(uint32(0), &m, ebpf.UpdateAny)
}

// CounterValue is a packets/bytes pair summed over CPUs.
type CounterValue struct{ Packets, Bytes uint64 }

func sumCounters(vals []gen.XdplimitXdplCounter) CounterValue {
	var c CounterValue
	for _, v := range vals {
		c.Packets += v.Packets
		c.Bytes += v.Bytes
	}
	return c
}

// Counters reads the global counters, summed over CPUs.
func (l *Limiter) Counters() (map[Counter]CounterValue, error) {
	out := make(map[Counter]CounterValue, nCounters)
	var vals []gen.XdplimitXdplCounter
	for i := 0; i < nCounters; i++ {
		if err := l.objs.XdplCounters.Lookup(uint32(i), &vals); err != nil {
			return nil, fmt.Errorf("reading counter %v: %w", Counter(i), err)
		}
		out[Counter(i)] = sumCounters(vals)
	}
	return out, nil
}

// RuleStat is one rule of the policy in force and its counters.
type RuleStat struct {
	Name       string
	Index      int
	Verdicts   [3]CounterValue // by Verdict
	LevelDrops []uint64        // drops by the level that refused, in evaluation order
}

// Active returns the generation in force and its configuration.
func (l *Limiter) active() (uint32, gen.XdplimitXdplControl, error) {
	var ctl gen.XdplimitXdplControl
	if err := l.objs.XdplCtl.Lookup(uint32(0), &ctl); err != nil {
		return 0, ctl, fmt.Errorf("reading the control map: %w", err)
	}
	return ctl.Active & 1, ctl, nil
}

func (l *Limiter) rule(g uint32, i int) (gen.XdplimitXdplRule, error) {
	var r gen.XdplimitXdplRule
	err := l.objs.XdplRules.Lookup(g*uint32(MaxRules)+uint32(i), &r)
	return r, err
}

func (l *Limiter) name(slot uint32) (string, error) {
	var n gen.XdplimitXdplName
	if err := l.objs.XdplNames.Lookup(slot, &n); err != nil {
		return "", err
	}
	b := make([]byte, 0, NameLen)
	for _, c := range n.Name {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b), nil
}

// RuleStats reads the counters of the rules in force, in policy order.
func (l *Limiter) RuleStats() ([]RuleStat, error) {
	g, ctl, err := l.active()
	if err != nil {
		return nil, err
	}
	var out []RuleStat
	var vals []gen.XdplimitXdplRuleStats
	for i := 0; i < int(ctl.Gen[g].Nrules) && i < MaxRules; i++ {
		r, err := l.rule(g, i)
		if err != nil {
			return nil, err
		}
		name, err := l.name(r.CounterSlot)
		if err != nil {
			return nil, err
		}
		if err := l.objs.XdplStats.Lookup(r.CounterSlot, &vals); err != nil {
			return nil, err
		}
		rs := RuleStat{Name: name, Index: i, LevelDrops: make([]uint64, r.Nlevels)}
		for _, v := range vals {
			for k := range rs.Verdicts {
				rs.Verdicts[k].Packets += v.V[k].Packets
				rs.Verdicts[k].Bytes += v.V[k].Bytes
			}
			for k := range rs.LevelDrops {
				rs.LevelDrops[k] += v.LevelDrops[k]
			}
		}
		out = append(out, rs)
	}
	return out, nil
}

// installed is a rule of the generation in force, for carrying state ids
// and counter slots over a reload.
type installed struct {
	slot   uint32
	levels []gen.XdplimitXdplLevel
}

// Apply writes img as the inactive generation and then makes it the active
// one with a single write, so that traffic sees the old policy or the new
// one and never a mix. Until that write nothing in force has changed: an
// error leaves the running policy as it was. Rules whose name and limit are
// unchanged keep their state; a changed limit starts fresh.
func (l *Limiter) Apply(img *Image) error {
	g, ctl, err := l.active()
	if err != nil {
		return err
	}
	next := g ^ 1
	meta, err := l.Meta()
	if err != nil {
		return err
	}

	old := map[string]installed{}
	for i := 0; i < int(ctl.Gen[g].Nrules) && i < MaxRules; i++ {
		r, err := l.rule(g, i)
		if err != nil {
			return err
		}
		name, err := l.name(r.CounterSlot)
		if err != nil {
			return err
		}
		old[name] = installed{slot: r.CounterSlot, levels: r.Levels[:r.Nlevels]}
	}

	// Counter slots follow rule names; new names take slots no rule in
	// force uses, zeroed.
	used := make([]bool, CounterSlots)
	for _, o := range old {
		used[o.slot] = true
	}
	// Global levels keep their state in xdpl_globals: a kept level keeps
	// its slot, a new one takes a slot no level in force uses, zeroed
	// before the switch.
	gused := make([]bool, globalSlots)
	for _, o := range old {
		for _, ol := range o.levels {
			if ol.KeyKind == keyGlobal && int(ol.Slot) < globalSlots {
				gused[ol.Slot] = true
			}
		}
	}
	gnext := 0
	rules := make([]gen.XdplimitXdplRule, len(img.Rules))
	nextFree := 0
	for i, rs := range img.Rules {
		r := &rules[i]
		o, had := old[rs.Name]
		if had {
			r.CounterSlot = o.slot
		} else {
			for nextFree < CounterSlots && used[nextFree] {
				nextFree++
			}
			if nextFree == CounterSlots {
				return fmt.Errorf("no free counter slot for rule %q", rs.Name)
			}
			used[nextFree] = true
			r.CounterSlot = uint32(nextFree)
			if err := l.resetSlot(r.CounterSlot, rs.Name); err != nil {
				return err
			}
		}
		if rs.Shadow {
			r.Flags |= rfShadow
		}
		r.Nlevels = uint8(len(rs.Levels))
		for k, ls := range rs.Levels {
			lv := &r.Levels[k]
			lv.Algorithm = ls.Params.Algorithm
			lv.KeyKind = ls.KeyKind
			lv.P1, lv.P2 = ls.Params.P1, ls.Params.P2
			if ls.Bytes {
				lv.Flags |= lfBytes
			}
			if l.clock == ClockCoarse && ls.needsFineClock(l.tickNs) {
				lv.Flags |= lfFineClock
			}
			if ls.trackFirst(l.trackAfter, ebpf.MustPossibleCPU()) {
				lv.Flags |= lfTrackFirst
			}
			if ls.KeyKind != keyGlobal {
				lv.Mask4 = prefixMask4(ls.V4Prefix)
				lv.Mask6 = prefixMask6(ls.V6Prefix)
			}
			lv.Origin = uint8(ls.Origin)
			lv.StateId = 0
			for _, ol := range o.levels {
				if had && ol.Origin == lv.Origin && sameLimit(ol, *lv) {
					lv.StateId = ol.StateId
				}
			}
			kept := lv.StateId != 0
			if !kept {
				lv.StateId = meta.NextStateId
				meta.NextStateId++
			}
			if ls.KeyKind == keyGlobal {
				if err := l.globalSlot(lv, o.levels, kept, gused, &gnext); err != nil {
					return fmt.Errorf("rule %q: %w", rs.Name, err)
				}
			}
		}
	}

	if err := l.writeGeneration(next, img, rules); err != nil {
		return fmt.Errorf("writing the new policy (the old one stays in force): %w", err)
	}
	if err := l.writeUnparsed(g, next, img.Unparsed); err != nil {
		return fmt.Errorf("writing the new policy (the old one stays in force): unparsed: %w", err)
	}
	cfg := gen.XdplimitXdplGenCfg{Dims: img.Dims, Nrules: uint32(len(rules))}
	if img.Shadow {
		cfg.Flags |= gfShadow
	}
	if len(img.Allow)+len(img.Deny) > 0 {
		cfg.Flags |= gfACL
	}
	ctl.Gen[next] = cfg
	if err := l.objs.XdplCtl.Update(uint32(0), &ctl, ebpf.UpdateAny); err != nil {
		return err
	}
	if err := l.SetMeta(meta); err != nil {
		return err
	}
	// The switch: only the active word differs from what is in the map.
	ctl.Active = next
	return l.objs.XdplCtl.Update(uint32(0), &ctl, ebpf.UpdateAny)
}

// SetPolicyInfo records which policy file is in force.
func (l *Limiter) SetPolicyInfo(path string, sha [32]byte) error {
	m, err := l.Meta()
	if err != nil {
		return err
	}
	m.PolicySha256 = sha
	m.PolicyPath = [256]int8{}
	for i := 0; i < len(path) && i < len(m.PolicyPath)-1; i++ {
		m.PolicyPath[i] = int8(path[i])
	}
	return l.SetMeta(m)
}

// PolicyPath decodes the policy path recorded in m.
func PolicyPath(m Meta) string {
	var b strings.Builder
	for _, c := range m.PolicyPath {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	return b.String()
}

// globalSlot gives a global level its slot in xdpl_globals: the slot of
// the level in force whose state it keeps, else a free one, zeroed.
func (l *Limiter) globalSlot(lv *gen.XdplimitXdplLevel, inForce []gen.XdplimitXdplLevel, kept bool, used []bool, next *int) error {
	if kept {
		for _, ol := range inForce {
			if ol.StateId == lv.StateId && ol.KeyKind == keyGlobal {
				lv.Slot = ol.Slot
				return nil
			}
		}
	}
	for *next < len(used) && used[*next] {
		*next++
	}
	if *next == len(used) {
		return fmt.Errorf("no free slot for a global level (%d in use)", len(used))
	}
	used[*next] = true
	lv.Slot = uint32(*next)
	return l.objs.XdplGlobals.Update(lv.Slot, &gen.XdplimitXdplState{}, ebpf.UpdateAny)
}

// sameLimit: the state of a level carries over when everything that gives
// its state meaning is unchanged.
func sameLimit(a, b gen.XdplimitXdplLevel) bool {
	return a.Algorithm == b.Algorithm && a.KeyKind == b.KeyKind && a.Mask4 == b.Mask4 &&
		a.Mask6 == b.Mask6 && a.P1 == b.P1 && a.P2 == b.P2 &&
		a.Flags&lfBytes == b.Flags&lfBytes
}

func (l *Limiter) resetSlot(slot uint32, name string) error {
	if len(name) >= NameLen {
		return fmt.Errorf("rule name %q longer than %d bytes", name, NameLen-1)
	}
	var n gen.XdplimitXdplName
	for i := 0; i < len(name); i++ {
		n.Name[i] = int8(name[i])
	}
	if err := l.objs.XdplNames.Update(slot, &n, ebpf.UpdateAny); err != nil {
		return err
	}
	zero := make([]gen.XdplimitXdplRuleStats, ebpf.MustPossibleCPU())
	return l.objs.XdplStats.Update(slot, zero, ebpf.UpdateAny)
}

func (l *Limiter) writeGeneration(g uint32, img *Image, rules []gen.XdplimitXdplRule) error {
	m := &l.objs.XdplimitMaps
	for i := range rules {
		if err := m.XdplRules.Update(g*uint32(MaxRules)+uint32(i), &rules[i], ebpf.UpdateAny); err != nil {
			return fmt.Errorf("rule %d: %w", i, err)
		}
	}
	for _, a := range []struct {
		m     *ebpf.Map
		slots uint32
		v     []Bitmap
	}{
		{m.XdplProto, protoSlots, img.Proto},
		{m.XdplDport, portSlots, img.DPort},
		{m.XdplSport, portSlots, img.SPort},
		{m.XdplTcpf, tcpfSlots, img.TCPFlags},
		{m.XdplVlan, vlanSlots, img.VLAN},
	} {
		if a.v == nil {
			continue // dimension unused: never looked up
		}
		if err := writeArray(a.m, g*a.slots, a.v); err != nil {
			return err
		}
	}
	if err := writeLPM(m.XdplSrc4, m.XdplSrc6, g, img.Src); err != nil {
		return fmt.Errorf("source prefixes: %w", err)
	}
	if err := writeLPM(m.XdplDst4, m.XdplDst6, g, img.Dst); err != nil {
		return fmt.Errorf("destination prefixes: %w", err)
	}
	var acl []lpmValue[uint32]
	for _, p := range img.Allow {
		acl = append(acl, lpmValue[uint32]{p, aclAllow})
	}
	for _, p := range img.Deny {
		acl = append(acl, lpmValue[uint32]{p, aclDeny})
	}
	if err := writeLPMValues(m.XdplAcl4, m.XdplAcl6, g, acl); err != nil {
		return fmt.Errorf("allow/deny lists: %w", err)
	}
	return nil
}

func writeArray(m *ebpf.Map, base uint32, vals []Bitmap) error {
	keys := make([]uint32, len(vals))
	for i := range keys {
		keys[i] = base + uint32(i)
	}
	// Batch in chunks: one syscall per few thousand entries.
	const chunk = 8192
	for i := 0; i < len(keys); i += chunk {
		j := min(i+chunk, len(keys))
		if _, err := m.BatchUpdate(keys[i:j], vals[i:j], nil); err != nil {
			// Kernels or maps without batch support: one by one.
			for k := i; k < j; k++ {
				if err := m.Update(keys[k], &vals[k], ebpf.UpdateAny); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

type lpmValue[V any] struct {
	prefix netip.Prefix
	value  V
}

func writeLPM(m4, m6 *ebpf.Map, g uint32, entries []PrefixBitmap) error {
	vals := make([]lpmValue[Bitmap], len(entries))
	for i, e := range entries {
		vals[i] = lpmValue[Bitmap]{e.Prefix, e.Rules}
	}
	return writeLPMValues(m4, m6, g, vals)
}

// writeLPMValues replaces generation g's entries of an IPv4/IPv6 trie pair.
func writeLPMValues[V any](m4, m6 *ebpf.Map, g uint32, entries []lpmValue[V]) error {
	if err := clearLPM[gen.XdplimitXdplLpm4](m4, g, func(k *gen.XdplimitXdplLpm4) uint8 { return k.Gen }); err != nil {
		return err
	}
	if err := clearLPM[gen.XdplimitXdplLpm6](m6, g, func(k *gen.XdplimitXdplLpm6) uint8 { return k.Gen }); err != nil {
		return err
	}
	for _, e := range entries {
		p := e.prefix.Masked()
		var err error
		if p.Addr().Is4() {
			k := gen.XdplimitXdplLpm4{Prefixlen: uint32(8 + p.Bits()), Gen: uint8(g), Addr: p.Addr().As4()}
			err = m4.Update(&k, &e.value, ebpf.UpdateAny)
		} else {
			k := gen.XdplimitXdplLpm6{Prefixlen: uint32(8 + p.Bits()), Gen: uint8(g), Addr: p.Addr().As16()}
			err = m6.Update(&k, &e.value, ebpf.UpdateAny)
		}
		if err != nil {
			if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.E2BIG) {
				return fmt.Errorf("%v: the trie is full (%d entries per family for both generations): %w", p, m4.MaxEntries(), err)
			}
			return fmt.Errorf("%v: %w", p, err)
		}
	}
	return nil
}

func clearLPM[K any](m *ebpf.Map, g uint32, genOf func(*K) uint8) error {
	// Collect first: deleting while walking a trie restarts the walk.
	var stale []K
	var cur, next K
	var prev any
	for {
		err := m.NextKey(prev, &next)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			break
		}
		if err != nil {
			return err
		}
		if uint32(genOf(&next)) == g {
			stale = append(stale, next)
		}
		cur = next
		prev = &cur
	}
	for i := range stale {
		if err := m.Delete(&stale[i]); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
	}
	return nil
}

// TrackedSources counts the state tables' entries by walking them: for the
// CLI, not for a scrape path.
func (l *Limiter) TrackedSources() (int, error) {
	n := 0
	var k4 gen.XdplimitXdplKey4
	var k gen.XdplimitXdplKey
	var v gen.XdplimitXdplState
	it := l.objs.XdplSources4.Iterate()
	for it.Next(&k4, &v) {
		n++
	}
	if err := it.Err(); err != nil {
		return n, err
	}
	it = l.objs.XdplSources.Iterate()
	for it.Next(&k, &v) {
		n++
	}
	return n, it.Err()
}

// SourcesCapacity is the state tables' size: IPv4 per-source keys plus
// every other key.
func (l *Limiter) SourcesCapacity() uint32 {
	return l.objs.XdplSources4.MaxEntries() + l.objs.XdplSources.MaxEntries()
}

// SourcesCapacities is each table's size: IPv4 per-source keys, and others.
func (l *Limiter) SourcesCapacities() (ipv4, other uint32) {
	return l.objs.XdplSources4.MaxEntries(), l.objs.XdplSources.MaxEntries()
}

// OpenPinned opens the maps of a running limiter without loading a program,
// for reading its state (status, metrics of another process).
func OpenPinned(pinned map[string]*ebpf.Map) (*Limiter, error) {
	spec, err := gen.LoadXdplimit()
	if err != nil {
		return nil, err
	}
	if err := checkPinnedLayout(pinned); err != nil {
		return nil, err
	}
	sizeFromPinned(spec, pinned)
	l := &Limiter{tickNs: CoarseTick()}
	if err := spec.LoadAndAssign(&l.objs.XdplimitMaps, &ebpf.CollectionOptions{MapReplacements: pinned}); err != nil {
		return nil, fmt.Errorf("opening pinned maps: %w", err)
	}
	meta, err := l.Meta()
	if err != nil {
		l.Close()
		return nil, err
	}
	if meta.LayoutVersion != LayoutVersion {
		l.Close()
		return nil, fmt.Errorf("pinned maps have layout version %d, this xdplimit reads %d", meta.LayoutVersion, LayoutVersion)
	}
	l.clock = Clock(meta.ClockMode)
	return l, nil
}

// DropSample is one sampled dropped packet.
type DropSample struct {
	Source  netip.Addr
	Verdict Verdict
	// Slot is the counter slot of the rule that dropped it; Deny marks the
	// deny list.
	Slot  uint32
	Deny  bool
	Bytes uint32
}

// DropRing reads the per-CPU rings of sampled drops. cursor is what the
// previous call returned (nil the first time); samples are those written
// since, at most the ring's size per CPU, with the number of samples each
// CPU wrote in the interval (more than returned when a ring wrapped).
func (l *Limiter) DropRing(cursor []uint64) (samples []DropSample, written uint64, next []uint64, err error) {
	var rings []gen.XdplimitXdplDropRing
	if err := l.objs.XdplDrops.Lookup(uint32(0), &rings); err != nil {
		return nil, 0, nil, err
	}
	const size = uint64(gen.XdplimitXdplConstXDPL_DROP_RING)
	next = make([]uint64, len(rings))
	for cpu, r := range rings {
		next[cpu] = r.Written
		var from uint64
		if cpu < len(cursor) {
			from = cursor[cpu]
		}
		if r.Written < from { // the maps were recreated
			from = 0
		}
		written += r.Written - from
		if r.Written-from > size {
			from = r.Written - size
		}
		for i := from; i < r.Written; i++ {
			s := r.S[i%size]
			d := DropSample{Verdict: Verdict(s.Verdict), Slot: uint32(s.Slot), Bytes: s.Len,
				Deny: uint32(s.Slot) == uint32(gen.XdplimitXdplConstXDPL_SAMPLE_DENY)}
			d.Source = addrOf(s.Family, s.Addr)
			samples = append(samples, d)
		}
	}
	return samples, written, next, nil
}

// SlotNames maps counter slots to the names of the rules in force.
func (l *Limiter) SlotNames() (map[uint32]string, error) {
	g, ctl, err := l.active()
	if err != nil {
		return nil, err
	}
	out := map[uint32]string{}
	for i := 0; i < int(ctl.Gen[g].Nrules) && i < MaxRules; i++ {
		r, err := l.rule(g, i)
		if err != nil {
			return nil, err
		}
		if out[r.CounterSlot], err = l.name(r.CounterSlot); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Why says what decided a packet.
type Why uint32

const (
	WhyNonIP     = Why(gen.XdplimitXdplConstXDPL_WHY_NON_IP)
	WhyMalformed = Why(gen.XdplimitXdplConstXDPL_WHY_MALFORMED)
	WhyAllow     = Why(gen.XdplimitXdplConstXDPL_WHY_ALLOW)
	WhyDeny      = Why(gen.XdplimitXdplConstXDPL_WHY_DENY)
	WhyUnmatched = Why(gen.XdplimitXdplConstXDPL_WHY_UNMATCHED)
	WhyRule      = Why(gen.XdplimitXdplConstXDPL_WHY_RULE)
)

func (w Why) String() string {
	switch w {
	case WhyNonIP:
		return "non-IP"
	case WhyMalformed:
		return "malformed"
	case WhyAllow:
		return "allow list"
	case WhyDeny:
		return "deny list"
	case WhyUnmatched:
		return "unmatched"
	case WhyRule:
		return "rule"
	}
	return fmt.Sprintf("why(%d)", uint32(w))
}

// Decision is what the program recorded for the last packet (Options.Record).
type Decision struct {
	Why     Why
	Verdict Verdict
	Rule    int // index in the policy, -1 when no rule decided
	Level   int // refusing level in policy order (0 = own limit), -1 if none refused
	// Key is the state key of the refusing level (or the rule's first
	// evaluated level when it admitted): the masked source, and the
	// destination port for src_ip+dst_port keys; invalid for global keys.
	Source netip.Addr // the source masked to the level's prefix
	Port   uint16
}

// LastDecision reads the decision recorded for the last packet.
func (l *Limiter) LastDecision() (Decision, error) {
	var d gen.XdplimitXdplDecision
	if err := l.objs.XdplLast.Lookup(uint32(0), &d); err != nil {
		return Decision{}, err
	}
	out := Decision{Why: Why(d.Why), Verdict: Verdict(d.Verdict), Rule: int(d.Rule), Level: int(d.Level), Port: d.Key.Port}
	out.Source = addrOf(d.Key.Family, d.Key.Addr)
	return out, nil
}

// addrOf decodes an address as the datapath stores it (IPv4 in the first
// word), or the zero Addr for a family other than 4 and 6.
func addrOf(family uint8, words [4]uint32) netip.Addr {
	var b [16]byte
	for k, w := range words {
		binary.NativeEndian.PutUint32(b[k*4:], w)
	}
	switch family {
	case 4:
		return netip.AddrFrom4([4]byte(b[:4]))
	case 6:
		return netip.AddrFrom16(b)
	}
	return netip.Addr{}
}
