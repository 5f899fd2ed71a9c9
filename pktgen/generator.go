package pktgen

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/gen"
	"github.com/xdplimit/xdplimit/internal/netns"
)

// Mode selects how the generator varies the source address.
type Mode uint32

const (
	// Fixed sends the template unchanged.
	Fixed = Mode(gen.PktgenPktgenModePKTGEN_MODE_FIXED)
	// Sequential walks Count sources from First, then wraps.
	Sequential = Mode(gen.PktgenPktgenModePKTGEN_MODE_SEQ)
	// Random draws sources from a hash of a per-CPU sequence number,
	// replacing the Mask bits of First.
	Random = Mode(gen.PktgenPktgenModePKTGEN_MODE_RANDOM)
)

func (m Mode) String() string {
	switch m {
	case Fixed:
		return "fixed"
	case Sequential:
		return "sequential"
	case Random:
		return "random"
	}
	return fmt.Sprintf("Mode(%d)", uint32(m))
}

// Sources says which source addresses the generator emits. For IPv6 only
// the low 32 bits vary; the high 96 come from First.
type Sources struct {
	Mode Mode
	// First is the first source (Sequential) or the address whose non-Mask
	// bits are kept (Random). The zero Addr means the template's source.
	// Send rewrites the template's source to First before it starts.
	First netip.Addr
	// Count is the number of Sequential sources (0 means 1).
	Count uint32
	// Mask selects the Random bits (0 means all 32). Random IPv4 sources
	// over all 32 bits include martians (0/8, 127/8, 224/4) that a
	// receiving stack drops, though XDP programs see them.
	Mask uint32
}

// Config configures a Generator.
type Config struct {
	Sources Sources
	// Timeout bounds every Send (default 60 s), on top of its context.
	Timeout time.Duration
	// KernelBatch is the live-frames batch size: frames the kernel
	// allocates and transmits per iteration (default 64, at most 256).
	KernelBatch uint32
	// CallDuration is the target length of one BPF_PROG_TEST_RUN call
	// (default 100 ms). The kernel cannot see our context, so Send notices
	// cancellation only between calls, up to this late. Calls are cheap
	// to repeat because Open holds the program in the XDP dispatcher
	// (HoldDispatcher); without that, each would cost 10-25 ms extra.
	CallDuration time.Duration
}

// Generator is a loaded xdpl_pktgen program. A Generator runs one Send at a
// time; Close releases it.
type Generator struct {
	cfg Config

	mu      sync.Mutex
	objs    genObjects
	hold    *DispatcherHold // nil when holding failed: slower, still correct
	sources Sources
}

type genObjects struct {
	Prog   *ebpf.Program  `ebpf:"xdpl_pktgen"`
	Stats  *ebpf.Map      `ebpf:"pktgen_stats"`
	State  *ebpf.Map      `ebpf:"pktgen_state"`
	Config *ebpf.Variable `ebpf:"pktgen_config"`
}

func (o *genObjects) Close() error {
	return errors.Join(o.Prog.Close(), o.Stats.Close(), o.State.Close())
}

// ErrTimeout is returned (wrapped) by Send when Config.Timeout expired.
var ErrTimeout = errors.New("pktgen: send timed out")

// Open loads the generator program.
func Open(cfg Config) (*Generator, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 60 * time.Second
	}
	if cfg.CallDuration <= 0 {
		cfg.CallDuration = 100 * time.Millisecond
	}
	if cfg.KernelBatch > 256 {
		return nil, fmt.Errorf("pktgen: kernel batch %d above 256", cfg.KernelBatch)
	}
	spec, err := gen.LoadPktgen()
	if err != nil {
		return nil, err
	}
	g := &Generator{cfg: cfg}
	// Assigning only what the generator uses keeps the receiver's map
	// (pktgen_seen) from being created.
	if err := spec.LoadAndAssign(&g.objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("pktgen: load: %+v", ve)
		}
		return nil, fmt.Errorf("pktgen: load: %w", err)
	}
	if err := g.SetSources(cfg.Sources); err != nil {
		g.objs.Close()
		return nil, err
	}
	// Best effort: without the hold every call pays the dispatcher
	// update, which costs speed, not correctness.
	g.hold, _ = HoldDispatcher(g.objs.Prog)
	return g, nil
}

// Close unloads the program.
func (g *Generator) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	var err error
	if g.hold != nil {
		err = g.hold.Close()
	}
	return errors.Join(err, g.objs.Close())
}

// SetSources changes the sources for later Sends.
func (g *Generator) SetSources(s Sources) error {
	switch s.Mode {
	case Fixed, Sequential, Random:
	default:
		return fmt.Errorf("pktgen: unknown mode %v", s.Mode)
	}
	if s.Count == 0 {
		s.Count = 1
	}
	if s.Mask == 0 {
		s.Mask = ^uint32(0)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.sources = s
	return nil
}

// Program returns the loaded xdpl_pktgen, for callers that drive
// BPF_PROG_TEST_RUN themselves. It is owned by the Generator.
func (g *Generator) Program() *ebpf.Program { return g.objs.Prog }

// Result describes one Send.
type Result struct {
	// Sent is the number of frames xdpl_pktgen returned XDP_TX for, from
	// its own per-CPU counters. It can exceed the requested count by up
	// to one call's worth of frames per signal that interrupted a call:
	// the library repeats an interrupted call whole.
	Sent uint64
	// PerCPU is Sent by CPU.
	PerCPU map[int]uint64
	// Bad is the number of frames refused as too short for the template's
	// offsets (should be 0).
	Bad     uint64
	Elapsed time.Duration
	// CPUTime is the CPU time of the sending threads. The peer's XDP
	// program and any stack processing that runs in the sender's softirq
	// are charged to it (this kernel has no IRQ time accounting), work
	// deferred to ksoftirqd is not. Sent/CPUTime is a rate that another
	// process's load on the machine does not dilute.
	CPUTime time.Duration
}

// PPSPerCPU is frames per second of the senders' CPU time.
func (r Result) PPSPerCPU() float64 {
	if r.CPUTime <= 0 {
		return 0
	}
	return float64(r.Sent) / r.CPUTime.Seconds()
}

// PPS is the send rate in frames per second.
func (r Result) PPS() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Sent) / r.Elapsed.Seconds()
}

// Mpps is PPS in millions.
func (r Result) Mpps() float64 { return r.PPS() / 1e6 }

func (r Result) String() string {
	return fmt.Sprintf("%d frames in %v (%.3f Mpps; %.3f Mpps per CPU-second)",
		r.Sent, r.Elapsed.Round(time.Millisecond), r.Mpps(), r.PPSPerCPU()/1e6)
}

// Send transmits count copies of frame out of ifname, a veth whose peer has
// an XDP program attached (frames to a peer without one vanish while still
// counting as sent). It runs the live-frames test run from threads locked
// into the network namespace at netnsPath ("" for the caller's own), since
// the kernel resolves the interface in the calling thread's namespace.
//
// With cpus, one thread pinned to each listed CPU sends an equal share in
// parallel; without, a single unpinned thread sends everything.
//
// Send stops early when ctx is done or Config.Timeout expires, returning
// what was sent so far together with the error. The frame's source is set
// to Sources.First (when valid) and then varied per frame in the kernel.
func (g *Generator) Send(ctx context.Context, netnsPath, ifname string, frame []byte, count uint64, cpus ...int) (Result, error) {
	g.mu.Lock()
	defer g.mu.Unlock()

	if count == 0 {
		return Result{PerCPU: map[int]uint64{}}, nil
	}
	seen := map[int]bool{}
	for _, cpu := range cpus {
		// Two threads on one CPU would share its per-CPU state.
		if cpu < 0 || seen[cpu] {
			return Result{}, fmt.Errorf("pktgen: bad CPU list %v", cpus)
		}
		seen[cpu] = true
	}
	template, cfg, err := g.prepare(frame)
	if err != nil {
		return Result{}, err
	}
	if err := g.objs.Config.Set(cfg); err != nil {
		return Result{}, fmt.Errorf("pktgen: set config: %w", err)
	}
	if err := g.resetState(cpus); err != nil {
		return Result{}, err
	}
	before, err := g.readStats()
	if err != nil {
		return Result{}, err
	}

	ctx, cancel := context.WithTimeoutCause(ctx, g.cfg.Timeout, ErrTimeout)
	defer cancel()

	// Every worker runs on a thread of its own, in the namespace.
	onThread := netns.Locked
	if netnsPath != "" {
		ns, err := netns.Open(netnsPath)
		if err != nil {
			return Result{}, fmt.Errorf("pktgen: %w", err)
		}
		defer ns.Close()
		onThread = ns.Do
	}

	workers := cpus
	if len(workers) == 0 {
		workers = []int{-1}
	}
	errs := make([]error, len(workers))
	cpuTimes := make([]time.Duration, len(workers))
	var wg sync.WaitGroup
	start := time.Now()
	for i, cpu := range workers {
		share := count / uint64(len(workers))
		if i == 0 {
			share += count % uint64(len(workers))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = onThread(func() (err error) {
				cpuTimes[i], err = g.worker(ctx, ifname, template, share, cpu)
				return err
			})
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)

	after, err := g.readStats()
	if err != nil {
		return Result{}, err
	}
	res := Result{PerCPU: map[int]uint64{}, Elapsed: elapsed}
	for _, t := range cpuTimes {
		res.CPUTime += t
	}
	for cpu := range after.tx {
		if d := after.tx[cpu] - before.tx[cpu]; d > 0 {
			res.PerCPU[cpu] = d
			res.Sent += d
		}
		res.Bad += after.bad[cpu] - before.bad[cpu]
	}
	// Every worker stops on a done context: report that once, and any
	// other failure in full. A context that expired after the last call
	// finished is no error.
	var failed []error
	stopped := false
	for _, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, context.Cause(ctx)):
			stopped = true
		default:
			failed = append(failed, err)
		}
	}
	switch {
	case len(failed) > 0:
		return res, errors.Join(failed...)
	case stopped && errors.Is(context.Cause(ctx), ErrTimeout):
		return res, fmt.Errorf("%w (Config.Timeout %v)", ErrTimeout, g.cfg.Timeout)
	case stopped:
		return res, context.Cause(ctx)
	}
	return res, nil
}

// prepare copies the frame, sets its source to Sources.First, and derives
// the program's configuration from its layout.
func (g *Generator) prepare(frame []byte) ([]byte, gen.PktgenPktgenCfg, error) {
	var cfg gen.PktgenPktgenCfg
	l, err := parseLayout(frame)
	if err != nil {
		return nil, cfg, err
	}
	template := append([]byte(nil), frame...)
	s := g.sources
	first := l.src(template)
	if s.First.IsValid() {
		if s.First.Unmap().Is4() != l.is4 {
			return nil, cfg, fmt.Errorf("pktgen: source %v and frame family differ", s.First)
		}
		first = s.First.Unmap()
		setSource(template, l, first)
	}
	if s.Mode == Sequential && uint64(s.Count)+uint64(low32(first)) > 1<<32 {
		return nil, cfg, fmt.Errorf("pktgen: %d sources from %v overflow 32 bits", s.Count, first)
	}
	if l.varyOff() > int(gen.PktgenPktgenLimitsPKTGEN_MAX_OFF) ||
		l.ipCsumOff > int(gen.PktgenPktgenLimitsPKTGEN_MAX_OFF) ||
		l.l4CsumOff > int(gen.PktgenPktgenLimitsPKTGEN_MAX_OFF) {
		return nil, cfg, fmt.Errorf("pktgen: headers longer than %d bytes", gen.PktgenPktgenLimitsPKTGEN_MAX_OFF)
	}
	cfg = gen.PktgenPktgenCfg{
		Mode:   uint32(s.Mode),
		Base:   low32(first),
		Count:  s.Count,
		Mask:   s.Mask,
		SrcOff: uint16(l.varyOff()),
	}
	// Every frame starts from the template's leading bytes (its headers):
	// pages come back from the receiver possibly edited.
	words := min(len(template)/8, len(cfg.Hdr))
	for i := 0; i < words; i++ {
		cfg.Hdr[i] = binary.NativeEndian.Uint64(template[i*8:])
	}
	cfg.HdrWords = uint16(words)
	if l.ipCsumOff >= 0 {
		cfg.Flags |= uint32(gen.PktgenPktgenFlagsPKTGEN_F_IP4CSUM)
		cfg.IpCsumOff = uint16(l.ipCsumOff)
	}
	if l.l4CsumOff >= 0 {
		cfg.Flags |= uint32(gen.PktgenPktgenFlagsPKTGEN_F_L4CSUM)
		cfg.L4CsumOff = uint16(l.l4CsumOff)
		if l.udp {
			cfg.Flags |= uint32(gen.PktgenPktgenFlagsPKTGEN_F_L4UDP)
		}
	}
	return template, cfg, nil
}

func low32(a netip.Addr) uint32 {
	b := a.As16()
	return binary.BigEndian.Uint32(b[12:])
}

// setSource rewrites the whole source address and patches the checksums
// with the same RFC 1624 update the BPF program uses, one 32-bit word at a
// time.
func setSource(frame []byte, l layout, src netip.Addr) {
	n := 4
	if !l.is4 {
		n = 16
	}
	newb := src.AsSlice()
	for w := 0; w < n; w += 4 {
		off := l.srcOff + w
		old := binary.BigEndian.Uint32(frame[off:])
		nw := binary.BigEndian.Uint32(newb[w:])
		if old == nw {
			continue
		}
		binary.BigEndian.PutUint32(frame[off:], nw)
		if l.ipCsumOff >= 0 {
			c := binary.BigEndian.Uint16(frame[l.ipCsumOff:])
			binary.BigEndian.PutUint16(frame[l.ipCsumOff:], csumReplace4(c, old, nw))
		}
		if l.l4CsumOff >= 0 {
			c := binary.BigEndian.Uint16(frame[l.l4CsumOff:])
			if l.udp && l.is4 && c == 0 {
				continue // UDP over IPv4 without a checksum
			}
			c = csumReplace4(c, old, nw)
			if l.udp && c == 0 {
				c = 0xffff
			}
			binary.BigEndian.PutUint16(frame[l.l4CsumOff:], c)
		}
	}
}

// csumReplace4 is RFC 1624 eqn. 3, HC' = ~(~HC + ~m + m').
func csumReplace4(csum uint16, from, to uint32) uint16 {
	sum := uint32(^csum)
	sum += (^from & 0xffff) + (^from >> 16)
	sum += (to & 0xffff) + (to >> 16)
	sum = (sum & 0xffff) + (sum >> 16)
	sum = (sum & 0xffff) + (sum >> 16)
	return ^uint16(sum)
}

// resetState zeroes every CPU's sequence number and staggers the
// Sequential cursors, so parallel CPUs start at different sources.
func (g *Generator) resetState(cpus []int) error {
	n, err := ebpf.PossibleCPU()
	if err != nil {
		return err
	}
	state := make([]gen.PktgenPktgenState, n)
	for i, cpu := range cpus {
		if cpu >= 0 && cpu < n {
			state[cpu].Cursor = uint32(uint64(i) * uint64(g.sources.Count) / uint64(len(cpus)))
		}
	}
	if err := g.objs.State.Put(uint32(0), state); err != nil {
		return fmt.Errorf("pktgen: reset state: %w", err)
	}
	return nil
}

type stats struct{ tx, bad []uint64 }

func (g *Generator) readStats() (stats, error) {
	var s stats
	for _, st := range []struct {
		key uint32
		out *[]uint64
	}{
		{uint32(gen.PktgenPktgenStatPKTGEN_STAT_TX), &s.tx},
		{uint32(gen.PktgenPktgenStatPKTGEN_STAT_BAD_FRAME), &s.bad},
	} {
		if err := g.objs.Stats.Lookup(st.key, st.out); err != nil {
			return s, fmt.Errorf("pktgen: read stats: %w", err)
		}
	}
	return s, nil
}

// xdpMD mirrors struct xdp_md, the context of an XDP test run. The kernel
// requires data_end to equal the frame length and data, data_meta and
// egress_ifindex to be 0.
type xdpMD struct {
	Data, DataEnd, DataMeta, IngressIfindex, RxQueueIndex, EgressIfindex uint32
}

// worker sends count frames from the calling thread, which Send has locked
// into the namespace and discards afterwards, so the affinity set here
// never leaks to other goroutines either.
func (g *Generator) worker(ctx context.Context, ifname string, frame []byte, count uint64, cpu int) (cpuTime time.Duration, err error) {
	if cpu >= 0 {
		if _, err := netns.Pin(cpu); err != nil {
			return 0, fmt.Errorf("pktgen: %w", err)
		}
	}
	ifindex, err := ifIndex(ifname)
	if err != nil {
		return 0, err
	}
	start := threadCPUTime()
	defer func() { cpuTime = threadCPUTime() - start }()
	opts := ebpf.RunOptions{
		Data:      frame,
		Flags:     unix.BPF_F_TEST_XDP_LIVE_FRAMES,
		BatchSize: g.cfg.KernelBatch,
		Context:   xdpMD{DataEnd: uint32(len(frame)), IngressIfindex: uint32(ifindex)},
	}

	// Start small and size later calls to last about CallDuration: the
	// rate differs a hundredfold between this VM and an emulated one.
	batch := uint64(1 << 14)
	for count > 0 {
		if err := ctx.Err(); err != nil {
			return 0, context.Cause(ctx)
		}
		n := min(count, batch)
		opts.Repeat = uint32(n)
		t0 := time.Now()
		if _, err := g.objs.Prog.Run(&opts); err != nil {
			return 0, fmt.Errorf("pktgen: test run on %s: %w", ifname, err)
		}
		dt := time.Since(t0)
		count -= n
		if dt > 0 {
			want := uint64(float64(n) * g.cfg.CallDuration.Seconds() / dt.Seconds())
			batch = min(max(want, 1<<10), 1<<24, batch*4)
		}
	}
	return 0, nil
}

func threadCPUTime() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

func ifIndex(name string) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return 0, err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFINDEX, ifr); err != nil {
		return 0, fmt.Errorf("pktgen: interface %s: %w", name, err)
	}
	return int(ifr.Uint32()), nil
}
