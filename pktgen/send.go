// SPDX-License-Identifier: Apache-2.0

// Send and what it reports: the live-frames test runs on threads locked into
// the sender's namespace (and pinned to CPUs when asked), the per-CPU counters
// read before and after, and how cancellation and the timeout end a run.
// Apart from generator.go because this is the hot path and its threading,
// which a reader of the settings need not hold in mind.

package pktgen

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/gen"
	"github.com/xdplimit/xdplimit/internal/cpupin"
	"github.com/xdplimit/xdplimit/internal/netns"
)

// ErrTimeout is returned (wrapped) by Send when Config.Timeout expired.
var ErrTimeout = errors.New("pktgen: send timed out")

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
	run, err := g.runWorkers(ctx, netnsPath, ifname, template, count, cpus)
	if err != nil {
		return Result{}, err
	}
	after, err := g.readStats()
	if err != nil {
		return Result{}, err
	}
	return run.result(before, after), g.stopErr(ctx, run.errs)
}

// workersRun is what the workers of one Send did: each one's error and CPU
// time, and the wall time they took together.
type workersRun struct {
	errs     []error
	cpuTimes []time.Duration
	elapsed  time.Duration
}

// runWorkers sends count copies of template from one thread a CPU of cpus
// (one unpinned thread without), each locked into the namespace at
// netnsPath, and waits for them all.
func (g *Generator) runWorkers(ctx context.Context, netnsPath, ifname string, template []byte, count uint64, cpus []int) (workersRun, error) {
	// Every worker runs on a thread of its own, in the namespace.
	onThread := cpupin.Locked
	if netnsPath != "" {
		ns, err := netns.Open(netnsPath)
		if err != nil {
			return workersRun{}, fmt.Errorf("pktgen: %w", err)
		}
		defer ns.Close()
		onThread = ns.Do
	}

	workers := cpus
	if len(workers) == 0 {
		workers = []int{-1}
	}
	run := workersRun{errs: make([]error, len(workers)), cpuTimes: make([]time.Duration, len(workers))}
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
			run.errs[i] = onThread(func() (err error) {
				run.cpuTimes[i], err = g.worker(ctx, ifname, template, share, cpu, g.rate/float64(len(workers)))
				return err
			})
		}()
	}
	wg.Wait()
	run.elapsed = time.Since(start)
	return run, nil
}

// result is what the counters moved between before and after.
func (run workersRun) result(before, after stats) Result {
	res := Result{PerCPU: map[int]uint64{}, Elapsed: run.elapsed}
	for _, t := range run.cpuTimes {
		res.CPUTime += t
	}
	for cpu := range after.tx {
		if d := after.tx[cpu] - before.tx[cpu]; d > 0 {
			res.PerCPU[cpu] = d
			res.Sent += d
		}
		res.Bad += after.bad[cpu] - before.bad[cpu]
	}
	return res
}

// stopErr is the error of a Send whose workers returned errs. Every worker
// stops on a done context: report that once, and any other failure in
// full. A context that expired after the last call finished is no error.
func (g *Generator) stopErr(ctx context.Context, errs []error) error {
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
		return errors.Join(failed...)
	case stopped && errors.Is(context.Cause(ctx), ErrTimeout):
		return fmt.Errorf("%w (Config.Timeout %v)", ErrTimeout, g.cfg.Timeout)
	case stopped:
		return context.Cause(ctx)
	}
	return nil
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
func (g *Generator) worker(ctx context.Context, ifname string, frame []byte, count uint64, cpu int, rate float64) (cpuTime time.Duration, err error) {
	if cpu >= 0 {
		if _, err := cpupin.Pin(cpu); err != nil {
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
	// Paced, calls carry a millisecond's frames each (at least one kernel
	// batch), and each waits for the moment the frames before it were due.
	// On a loaded or emulated CPU a call can cost more than the millisecond
	// it carries, and the rate would fall far short (a tenth of it, seen):
	// a call behind the pace carries the frames owed, up to what two calls
	// at the last one's cost carry at the rate, so the rate holds without
	// bursts a receiver's ring could not take.
	var sent uint64
	var lastCall time.Duration
	if rate > 0 {
		batch = max(uint64(rate/1000), uint64(max(g.cfg.KernelBatch, 1)))
	}
	paceStart := time.Now()
	for count > 0 {
		n := min(count, batch)
		if rate > 0 {
			due := paceStart.Add(time.Duration(float64(sent) / rate * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				select {
				case <-ctx.Done():
				case <-time.After(d):
				}
			}
			if owed := uint64(time.Since(paceStart).Seconds() * rate); owed > sent+n {
				n = min(count, owed-sent, max(batch, uint64(2*lastCall.Seconds()*rate)))
			}
		}
		if err := ctx.Err(); err != nil {
			return 0, context.Cause(ctx)
		}
		opts.Repeat = uint32(n)
		t0 := time.Now()
		if _, err := g.objs.Prog.Run(&opts); err != nil {
			return 0, fmt.Errorf("pktgen: test run on %s: %w", ifname, err)
		}
		dt := time.Since(t0)
		lastCall = dt
		count -= n
		sent += n
		if dt > 0 && rate == 0 {
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
