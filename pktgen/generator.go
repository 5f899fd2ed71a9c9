// SPDX-License-Identifier: Apache-2.0

// The Generator's lifecycle and settings: the source modes, Config, loading
// xdpl_pktgen (Open, held in the XDP dispatcher) and Close. Sending is in
// send.go, turning a frame into the program's template in template.go.

package pktgen

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"sync"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/gen"
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
	// DstPorts varies the destination port instead of the source address
	// (a flood to many ports of one host): the generator rewrites the
	// 32-bit word of the transport header's two ports, Random over Mask's
	// low 16 bits, Sequential over Count ports from the template's. The
	// source is First (or the template's) in every frame.
	DstPorts bool
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
	rate    float64 // frames per second across the workers; 0: as fast as it can
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

// SetRate paces later Sends to at most pps frames per second, shared
// equally by their workers; 0 sends as fast as the CPUs allow. A paced
// flood is one the receiver can absorb: a veth's ring that overflows drops
// frames at random before any XDP program sees them, the traffic a test
// follows among them.
func (g *Generator) SetRate(pps float64) error {
	if pps < 0 || math.IsNaN(pps) || math.IsInf(pps, 0) {
		return fmt.Errorf("pktgen: bad rate %v", pps)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.rate = pps
	return nil
}

// Program returns the loaded xdpl_pktgen, for callers that drive
// BPF_PROG_TEST_RUN themselves. It is owned by the Generator.
func (g *Generator) Program() *ebpf.Program { return g.objs.Prog }
