// SPDX-License-Identifier: Apache-2.0

package maps

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
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
	// MaxLogs sizes the sliding_log table (0: MaxSources / 16): one log of
	// model.LogBytes per key of a sliding_log level. UnusedLogs leaves it
	// unallocated for a policy without such levels (LogsFor chooses).
	MaxLogs uint32
	Clock   Clock
	// Pinned maps to reuse instead of creating new ones (adopting the
	// state of a running limiter), by map name.
	Pinned map[string]*ebpf.Map
	// SampleOneIn, when set, overrides the policy's sample rate of
	// dropped packets (a power of two; tests use 1 to see every drop).
	SampleOneIn uint32
	// BenchRotate (benchmarks only) makes the program rewrite the IPv4
	// source of each test-run buffer to the next of BenchRotate addresses
	// from BenchBase (a power of two; 0 = off).
	BenchRotate uint32
	BenchBase   netip.Addr
	// BenchParseOnly (benchmarks only) makes the program parse each
	// packet and drop it, nothing more: the floor under every verdict
	// (BenchStop StopParse).
	BenchParseOnly bool
	// BenchStop (benchmarks only; 0 = off) makes the program drop each
	// packet after that stage: what each stage adds, measured. Past the
	// parser it loads the stage benchmark's build of the program
	// (gen.XdplimitStages), whose stages test the knob.
	BenchStop Stage
	// BenchFloor (benchmarks only; 0 = off) makes the program end each
	// parsed packet in that floor program where the parser alone would
	// drop it (the stage benchmark's build too).
	BenchFloor Floor
	// BenchObject (benchmarks only) loads the program from this ELF
	// object, another build's production program (make bench-against),
	// instead of the embedded one: both measured side by side. Its maps
	// must have this build's layout; the stage benchmark's knobs are
	// not in it.
	BenchObject string
	// BenchFrame (benchmarks only) makes the program restore each
	// test-run buffer to this frame before anything else (at most 128
	// bytes): for verdicts that rewrite the frame (a SYN answered with a
	// SYN-ACK), which the kernel's repeated runs would otherwise see.
	BenchFrame []byte
	// Record makes the program record each packet's decision, read with
	// LastDecision (pcap replay; costs a map write per packet).
	Record bool
	// TrackAfter: a key missing from the state table gets an entry once
	// this CPU has seen it this many times within one 16.8 ms sketch epoch (0 means 2; 1
	// tracks every key at its first packet; at most MaxTrackAfter). See
	// docs/design.md.
	TrackAfter uint32
	// MaxBans sizes the ban table (a power of two; 0 means
	// DefaultMaxBans). A pinned table keeps its size.
	MaxBans uint32
	// NoRefusedCache turns the per-CPU refused-until cache off
	// (benchmarks compare both; verdicts are the same either way).
	NoRefusedCache bool
	// NoCookieACKs skips the check of TCP ACKs against SYN cookies, which
	// looks up the sockets of the namespace running the program: a replay
	// of a capture runs where the captured host's listeners, and its
	// cookie secret, are not.
	NoCookieACKs bool
}

// Limiter is the loaded (not necessarily attached) XDP program and its maps.
type Limiter struct {
	objs        gen.XdplimitObjects
	fleetApply  *ebpf.Program // bpf/fleet_apply.bpf.c; nil for OpenPinned
	wipe        *ebpf.Program // bpf/wipe.bpf.c, loaded by the first Reset
	wipeSpec    *ebpf.ProgramSpec
	egress      *ebpf.Program   // bpf/egress.bpf.c, loaded by EgressProgram
	fleetKeys   *ringbuf.Reader // opened by DrainFleetKeys
	clock       Clock
	tickNs      uint64
	trackAfter  uint32
	sampleOneIn uint32 // Options.SampleOneIn
	table4Seed  uint64 // the IPv4 state table's hash seed (bpf/table4.h)
	// conntrackErr: why the program, when it was loaded, could not look
	// up conntrack (ConntrackLookups); nil when it can. conntrackKnown:
	// Load decided; a limiter of pinned maps asks the kernel when a policy
	// needs it, not when it opens (reading BTF takes seconds under
	// emulation, and status, top and reload open pins).
	conntrackErr   error
	conntrackKnown bool
	// ctlMu orders this process's writes of the control word: Apply's
	// and EnableBanLookup's (a fleet engine's, from its own goroutine).
	ctlMu sync.Mutex
	// banMu orders this process's writes of the ban table: each picks
	// slots from one reading of it, and two feeds (the fleet sync, a
	// CrowdSec bouncer) write from their own goroutines.
	banMu sync.Mutex
	// srcGen is the generation Source last read (source.go).
	srcMu  sync.Mutex
	srcGen *sourceGen
	// drops maps the drop samples for DropRing (dropring.go).
	drops   ringView
	traffic ringView
}

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
	spec, err := loadSpec(opts)
	if err != nil {
		return nil, err
	}
	l := &Limiter{clock: opts.Clock, tickNs: CoarseTick(), trackAfter: opts.TrackAfter, sampleOneIn: opts.SampleOneIn,
		conntrackErr: conntrackOf(spec), conntrackKnown: true}
	if l.trackAfter == 0 {
		l.trackAfter = DefaultTrackAfter
	}
	if err := spec.Variables[gen.XdplimitVarXdplTable4Seed].Get(&l.table4Seed); err != nil {
		return nil, err
	}
	err = spec.LoadAndAssign(&l.objs, &ebpf.CollectionOptions{MapReplacements: opts.Pinned})
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return nil, fmt.Errorf("the kernel's verifier rejected the program: %+v", ve)
	}
	if err != nil {
		return nil, fmt.Errorf("loading the program: %w", err)
	}
	if l.fleetApply, err = loadFleetApply(l.mapsByName(), l.table4Seed, ebpf.ProgramOptions{}); err != nil {
		l.Close()
		return nil, err
	}
	meta, err := l.Meta()
	if err != nil {
		l.Close()
		return nil, err
	}
	switch meta.LayoutVersion {
	case 0: // new maps
		if err := l.initNew(meta); err != nil {
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

// initNew writes what new maps start with: the layout's metadata, the drop
// samplers' seeds and a random ban epoch. meta is what the maps hold (zero
// but for what the caller kept).
func (l *Limiter) initNew(meta Meta) error {
	meta.LayoutVersion = LayoutVersion
	meta.NextStateID = 1
	meta.Table4Seed = l.table4Seed
	meta.Clock = l.clock
	meta.Tick = time.Duration(l.tickNs)
	if err := l.SetMeta(meta); err != nil {
		return err
	}
	if err := l.seedSampler(); err != nil {
		return err
	}
	// The ban epoch starts at a random word, never at the 0 that packets
	// carry when their generation reads no epoch: an entry learned that way
	// can then never pass for one stamped with the epoch, whatever the
	// generation's flags say (refused.h, flows.h).
	return l.moveBanEpoch()
}

// loadSpec is the program as Load loads it for opts: maps sized, load-time
// constants set (TestVerifierBudget loads the same spec with the
// verifier's statistics on).
func loadSpec(opts Options) (*ebpf.CollectionSpec, error) {
	load := gen.LoadXdplimit
	if opts.stagesBuild() {
		load = gen.LoadXdplimitStages
	}
	if opts.BenchObject != "" {
		if opts.stagesBuild() {
			return nil, fmt.Errorf("bench object %s is a production build: no stage stop or floor in it", opts.BenchObject)
		}
		load = func() (*ebpf.CollectionSpec, error) { return ebpf.LoadCollectionSpec(opts.BenchObject) }
	}
	spec, err := load()
	if err != nil {
		return nil, fmt.Errorf("reading the embedded program: %w", err)
	}
	if opts.MaxSources > 0 {
		spec.Maps[Sources4Map].MaxEntries = sets4(opts.MaxSources)
		spec.Maps[SourcesMap].MaxEntries = max(opts.MaxSources/4, 1)
		spec.Maps[LogsMap].MaxEntries = logsOf(opts.MaxSources)
	}
	if opts.MaxOtherSources > 0 {
		spec.Maps[SourcesMap].MaxEntries = opts.MaxOtherSources
	}
	if opts.MaxLogs > 0 {
		spec.Maps[LogsMap].MaxEntries = opts.MaxLogs
	}
	spec.Maps[sketchMap].MaxEntries = sketchLines()
	spec.Maps[dropSamplesMap].MaxEntries = dropSamples()
	spec.Maps[gen.XdplimitMapXdplTrafficSamples].MaxEntries = uint32(ebpf.MustPossibleCPU()) * TrafficRingSize
	if opts.MaxBans == 0 {
		opts.MaxBans = DefaultMaxBans
	}
	if err := CheckMaxBans(opts.MaxBans); err != nil {
		return nil, err
	}
	sizeBans(spec, opts.MaxBans)
	sizeTries(spec)
	if err := checkPinnedLayout(opts.Pinned); err != nil {
		return nil, err
	}
	sizeFromPinned(spec, opts.Pinned)
	if err := setConstants(spec, opts); err != nil {
		return nil, err
	}
	seed, err := table4Seed(opts.Pinned)
	if err != nil {
		return nil, err
	}
	if err := setTable4(spec, seed); err != nil {
		return nil, err
	}
	return spec, nil
}

// stagesBuild: the knobs ask for the stage benchmark's build
// (gen.XdplimitStages), which production's lacks.
func (opts Options) stagesBuild() bool {
	return opts.BenchStop > StopParse || opts.BenchFloor != 0
}

func setConstants(spec *ebpf.CollectionSpec, opts Options) error {
	if opts.SampleOneIn&(opts.SampleOneIn-1) != 0 || opts.BenchRotate&(opts.BenchRotate-1) != 0 {
		return fmt.Errorf("sample rate 1/%d and bench rotation %d must be powers of two", opts.SampleOneIn, opts.BenchRotate)
	}
	// The parser alone ends the packet before a floor program could run.
	if opts.BenchFloor != 0 && (opts.BenchParseOnly || opts.BenchStop != 0) {
		return fmt.Errorf("bench floor %d runs after the parser, instead of the stages: not with a stop (%d) or the parser alone", opts.BenchFloor, opts.BenchStop)
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
	if trackAfter > MaxTrackAfter {
		return fmt.Errorf("track after %d packets: the admission sketch counts up to %d", trackAfter, MaxTrackAfter)
	}
	var seed [8]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return err
	}
	if err := spec.Variables["xdpl_sketch_seed"].Set(binary.NativeEndian.Uint64(seed[:])); err != nil {
		return err
	}
	// The conntrack kfuncs' calls stay in the program only where they
	// resolve (bpf/conntrack.h).
	if ConntrackLookups() == nil {
		if err := spec.Variables["xdpl_conntrack"].Set(uint32(1)); err != nil {
			return err
		}
	}
	// The width follows the map's size: an adopted sketch keeps its own.
	width := sketchWidthOf(spec.Maps[sketchMap].MaxEntries)
	if width < uint32(gen.XdplimitXdplConstXDPL_SKETCH_LINE_CELLS) || width&(width-1) != 0 {
		return fmt.Errorf("sketch of %d lines does not fit %d CPUs", spec.Maps[sketchMap].MaxEntries, ebpf.MustPossibleCPU())
	}
	// So does each CPU's drop ring.
	ring := spec.Maps[dropSamplesMap].MaxEntries / uint32(ebpf.MustPossibleCPU())
	if ring == 0 || ring&(ring-1) != 0 {
		return fmt.Errorf("drop rings of %d samples do not fit %d CPUs", spec.Maps[dropSamplesMap].MaxEntries, ebpf.MustPossibleCPU())
	}
	for name, v := range map[string]uint32{
		"xdpl_sketch_width_mask": width - 1,
		"xdpl_drop_ring_mask":    ring - 1,
		"xdpl_traffic_ring_mask": TrafficRingSize - 1,
		"xdpl_track_after":       trackAfter,
		"xdpl_clock_mode":        uint32(opts.Clock),
		"xdpl_bench_rotate":      opts.BenchRotate,
		"xdpl_bench_base":        base,
		"xdpl_bench_parse_only":  b2u(opts.BenchParseOnly || opts.BenchStop == StopParse || opts.BenchFloor != 0),
		"xdpl_record":            b2u(opts.Record),
		"xdpl_ban_set_mask":      spec.Maps[banMap].MaxEntries/BanWays - 1,
		"xdpl_refused_on":        b2u(!opts.NoRefusedCache),
		"xdpl_cookie_acks_on":    b2u(!opts.NoCookieACKs),
	} {
		if err := spec.Variables[name].Set(v); err != nil {
			return fmt.Errorf("setting %s: %w", name, err)
		}
	}
	// Only the stage benchmark's build has these knobs (loadSpec).
	if opts.stagesBuild() {
		for name, v := range map[string]uint32{"xdpl_bench_stop": uint32(opts.BenchStop), "xdpl_bench_floor": uint32(opts.BenchFloor)} {
			if err := spec.Variables[name].Set(v); err != nil {
				return fmt.Errorf("setting %s: %w", name, err)
			}
		}
	}
	if err := setBenchFrame(spec, opts.BenchFrame); err != nil {
		return err
	}
	// The coarse clock counts jiffies; this is how many ns each one is.
	if err := spec.Variables["xdpl_tick_ns"].Set(CoarseTick()); err != nil {
		return fmt.Errorf("setting xdpl_tick_ns: %w", err)
	}
	return nil
}

func setBenchFrame(spec *ebpf.CollectionSpec, frame []byte) error {
	v := spec.Variables["xdpl_bench_frame"]
	if len(frame) > int(v.Size()) {
		return fmt.Errorf("bench frame of %d bytes: at most %d", len(frame), v.Size())
	}
	buf := make([]byte, v.Size())
	copy(buf, frame)
	if err := v.Set(buf); err != nil {
		return fmt.Errorf("setting xdpl_bench_frame: %w", err)
	}
	return spec.Variables["xdpl_bench_frame_len"].Set(uint32(len(frame)))
}

const sketchMap = gen.XdplimitMapXdplSketchMap

const dropSamplesMap = gen.XdplimitMapXdplDropSamples

func b2u(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// seedSampler gives each CPU's samplers, of drops and of every packet, a
// random, non-zero xorshift state (zero would stay zero and sample every
// packet).
func (l *Limiter) seedSampler() error {
	for _, m := range []*ebpf.Map{l.objs.XdplDrops, l.objs.XdplTraffic} {
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
		if err := m.Update(uint32(0), rings, ebpf.UpdateAny); err != nil {
			return err
		}
	}
	return nil
}

// Program is the XDP program.
func (l *Limiter) Program() *ebpf.Program { return l.objs.XdplMain }

// Clock is the time source the program was loaded with.
func (l *Limiter) Clock() Clock { return l.clock }

// Close releases the program and map file descriptors. Pinned objects and
// an attached link keep the datapath running.
func (l *Limiter) Close() error {
	if l.fleetKeys != nil {
		l.fleetKeys.Close()
	}
	if l.fleetApply != nil {
		l.fleetApply.Close()
	}
	if l.egress != nil {
		l.egress.Close()
	}
	if l.wipe != nil {
		l.wipe.Close()
	}
	l.closeDropMem()
	return l.objs.Close()
}

// SetClock sets the injected time (ClockMap only).
func (l *Limiter) SetClock(ns uint64) error {
	return l.objs.XdplClock.Update(uint32(0), ns, ebpf.UpdateAny)
}
