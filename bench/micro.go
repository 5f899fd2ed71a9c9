// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/internal/netns"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

// Limits for the micro cases. The drop limits admit one packet a minute,
// so after a short warm-up every measured packet takes the over-limit path;
// the pass limits are far above what one CPU can offer, so every packet is
// admitted and its state written.
const (
	tbDrop = "{algorithm: token_bucket, rate: 1/m, burst: 1}"
	tbPass = "{algorithm: token_bucket, rate: 100000000/s, burst: 100000000}"
	fwDrop = "{algorithm: fixed_window, packets: 1, window: 1m}"
	fwPass = "{algorithm: fixed_window, packets: 1000000000, window: 1s}"
	swDrop = "{algorithm: sliding_window, packets: 1, window: 1m}"
	swPass = "{algorithm: sliding_window, packets: 1000000000, window: 1s}"
	// A log holds at most 64 packets, and a policy's window is at least
	// 1 ms: no policy admits every packet one CPU offers. The pass case
	// loads this one with its window cut to 1 ns (slidingLogPass).
	slDrop = "{algorithm: sliding_log, packets: 1, window: 1m}"
	slPass = "{algorithm: sliding_log, packets: 64, window: 1ms}"

	xdpDrop = 1
	xdpPass = 2
)

// oneRule is the smallest policy that limits: one rule matching every IP
// packet, per source address.
func oneRule(limit string) string {
	return "rules:\n  - name: r\n    limit: " + limit + "\n"
}

// manyRules has n rules; rule i < n-1 matches UDP destination port 1000+i,
// the last one port 53, which the test packet carries, so the packet is
// classified against every rule and matches the last.
func manyRules(n int, limit string) string {
	var b strings.Builder
	b.WriteString("rules:\n")
	for i := range n - 1 {
		fmt.Fprintf(&b, "  - name: r%03d\n    match: {protocol: udp, dst_ports: [%d]}\n    limit: %s\n", i, 1000+i, limit)
	}
	fmt.Fprintf(&b, "  - name: last\n    match: {protocol: udp, dst_ports: [53]}\n    limit: %s\n", limit)
	return b.String()
}

// allowList is n distinct random IPv4 /32s, none in 192.0.2.0/24 (the test
// packet's source), as a netset file. Random addresses spread over the
// whole space make the trie as deep as a real list of this size; a block of
// consecutive addresses would let a lookup for an outside address stop
// near the root.
func allowList(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 3))
	seen := make(map[uint32]bool, n)
	var b strings.Builder
	for len(seen) < n {
		a := r.Uint32()
		if a>>8 == 192<<16|0<<8|2 || seen[a] {
			continue
		}
		seen[a] = true
		fmt.Fprintf(&b, "%d.%d.%d.%d\n", a>>24, a>>16&0xff, a>>8&0xff, a&0xff)
	}
	return []byte(b.String())
}

var (
	microSrc4 = netip.MustParseAddr("192.0.2.1")
	microDst4 = netip.MustParseAddr("198.51.100.1")
	microSrc6 = netip.MustParseAddr("2001:db8:1::1")
	microDst6 = netip.MustParseAddr("2001:db8:2::1")
	// microBase is where the many-source cases' sources start.
	microBase = netip.MustParseAddr("10.0.0.0")
)

// benchWalk mirrors xdpl_bench_next_source in bpf/xdplimit.bpf.c: the
// offset of the next source from the base, a full-period LCG modulo n.
func benchWalk(x, n uint32) uint32 { return (x*1103515245 + 12345) & (n - 1) }

type microCase struct {
	group, name, note string
	// baseline marks the bare XDP_DROP case the ratios divide by.
	baseline bool
	// floor names the parser-alone case of the same frame, when it is
	// not the UDP one (mParser).
	floor string
	prog  *ebpf.Program
	frame []byte
	want  uint32 // expected verdict of the measured packets; 0: mixed
	warm  int    // runs before measuring: a source over its limit, a full table

	// rotate > 0: the program walks the source over rotate addresses from
	// base. Every call starts from the frame's source again, so the frame
	// is advanced past the addresses the previous call used: otherwise a
	// "new source" case would measure known ones from its second call on.
	rotate uint32
	base   uint32
	pos    uint32

	ns  sample
	err error

	// netns, when set, is the namespace the case runs in: the socket
	// lookups of BPF_PROG_TEST_RUN search the calling thread's.
	netns *netns.Netns

	// The limiter behind prog, when there is one, and what its counters
	// said before the measured calls: the many-source cases report how
	// often a packet cost a table insert.
	lim      *maps.Limiter
	before   map[maps.Counter]maps.CounterValue
	measured int
	inserts  float64 // table inserts per measured packet; -1: not known
	hits     float64 // refusals from the flow and refused-until caches per measured packet
}

// cached: the packets the flow cache and the refused-until cache refused.
func cached(cs map[maps.Counter]maps.CounterValue) uint64 {
	return cs[maps.CounterRefusedCached].Packets + cs[maps.CounterFlowCached].Packets
}

// countInserts records the inserts the measured calls made.
func (c *microCase) countInserts() {
	c.inserts = -1
	if c.lim == nil || c.before == nil || c.measured == 0 {
		return
	}
	after, err := c.lim.Counters()
	if err != nil {
		return
	}
	c.inserts = float64(after[maps.CounterNewSource].Packets-c.before[maps.CounterNewSource].Packets) / float64(c.measured)
	c.hits = float64(cached(after)-cached(c.before)) / float64(c.measured)
}

func (c *microCase) advance(runs int) {
	if c.rotate == 0 {
		return
	}
	for range runs {
		c.pos = benchWalk(c.pos, c.rotate)
	}
	pktgen.SetSource4(c.frame, c.base+c.pos)
}

// run makes two BPF_PROG_TEST_RUN calls, of repeat/4 and repeat runs, and
// returns ns per packet timed by the slope between them (slopeTimer).
func (c *microCase) run(repeat int) (ns float64, err error) {
	err = inNetns(c.netns, func() error { ns, err = c.slope(repeat); return err })
	return ns, err
}

func (c *microCase) slope(repeat int) (float64, error) {
	var s slopeTimer
	for _, n := range s.counts(repeat) {
		ret, err := s.call(c.prog, c.frame, n)
		c.advance(n)
		c.measured += n
		if err != nil {
			return 0, err
		}
		if c.want != 0 && ret != c.want {
			return 0, fmt.Errorf("the last packet got verdict %d, the case is built to measure verdict %d", ret, c.want)
		}
	}
	return s.perPacket()
}

type microResults struct {
	Repeat, Rounds int
	CPU            int
	Cases          []*microCase
	FleetPairs     []*fleetPair
	ParserPairs    []*parserPair
	TwoCPU         []*twoCPU
}

func (r *microResults) baseline() float64 {
	for _, c := range r.Cases {
		if c.baseline && c.err == nil {
			return c.ns.median()
		}
	}
	return 0
}

func (r *microResults) find(name string) *microCase {
	for _, c := range r.Cases {
		if c.name == name {
			return c
		}
	}
	return nil
}

// microBench measures every case on one pinned CPU, rounds interleaved:
// round 1 of every case, then round 2, so that a burst of other load on the
// machine spreads over all cases instead of skewing one.
func microBench(e *env, quick bool) (*microResults, error) {
	res := &microResults{Repeat: 1 << 20, Rounds: 7, CPU: 1}
	if quick {
		res.Repeat, res.Rounds = 1<<18, 3
	}
	s := newMicroSetup(e, res)
	defer s.close()
	s.addAll()
	err := onPinnedThread(res.CPU, func() error { return res.measure(e) })
	if err == nil {
		res.measureTwoCPU(e, []string{mTBDrop, mTBDropOff, mTBPass, mAggDrop, mAggPass})
	}
	return res, err
}

// measure runs on the pinned thread: the warm-up, the interleaved rounds,
// then the paired cases.
func (r *microResults) measure(e *env) error {
	r.warm(e)
	for _, c := range r.Cases {
		if c.err == nil && c.lim != nil {
			c.before, _ = c.lim.Counters()
		}
	}
	if err := r.rounds(e); err != nil {
		return err
	}
	for _, c := range r.Cases {
		c.countInserts()
	}
	if err := r.measureParserPairs(e, 3*r.Rounds); err != nil {
		return err
	}
	return r.measureFleetPairs(e, 3*r.Rounds)
}

// warm brings each case to the state it measures: a source over its
// limit, a full table.
func (r *microResults) warm(e *env) {
	for _, c := range r.Cases {
		if c.err != nil || c.warm == 0 {
			continue
		}
		e.Logf("micro: warming %q (%d runs)", c.name, c.warm)
		if err := inNetns(c.netns, func() error { _, _, err := c.prog.Benchmark(c.frame, c.warm, nil); return err }); err != nil {
			c.err = err
		}
		c.advance(c.warm)
	}
}

// rounds measures every case once a round; a case that fails keeps its
// error and is left out of the later rounds.
func (r *microResults) rounds(e *env) error {
	for round := range r.Rounds {
		e.Logf("micro: round %d of %d", round+1, r.Rounds)
		for _, c := range r.Cases {
			if c.err != nil {
				continue
			}
			ns, err := c.run(r.Repeat)
			if err != nil {
				c.err = err
				continue
			}
			c.ns = append(c.ns, ns)
		}
		if err := e.ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}
