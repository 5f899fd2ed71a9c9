package main

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"

	"github.com/cilium/ebpf"

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
func (c *microCase) run(repeat int) (float64, error) {
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

// Names of the cases the targets refer to.
const (
	mBare         = "bare XDP_DROP"
	mParse        = "parse only (empty policy, unmatched)"
	mParser       = "the parser alone, then XDP_DROP (a benchmark knob)"
	mParserRotate = "the parser alone, the program rotating the source over 2^24 addresses"
	mTBDrop       = "token bucket, over limit (drop)"
	mTBPass       = "token bucket, under limit (pass)"
	mTBDropK      = "token bucket, drop, clock: ktime"
	mTBPassK      = "token bucket, pass, clock: ktime"
	mFWDrop       = "fixed window, over limit (drop)"
	mFWPass       = "fixed window, under limit (pass)"
	mSWDrop       = "sliding window, over limit (drop)"
	mSWPass       = "sliding window, under limit (pass)"
	mSLDrop       = "sliding log, over limit (drop)"
	mSLPass       = "sliding log, under limit (pass)"
	mIPv6         = "IPv6 source (/64 key), token bucket, drop"
	mIPv6Ext10    = "IPv6 source behind 10 extension headers, token bucket, drop"
	mAggDrop      = "token bucket + global aggregate, over the source's limit (drop)"
	mAggPass      = "token bucket + global aggregate, under both (pass)"
	mKnown64k     = "64k known sources, 1M table, token bucket (mostly drop)"
	mNew64k       = "new source into a full 64k table"
	mNew1M        = "new source into a full 1M table"
	mNewTracked1M = "new source into a full 1M table, always inserted"
	mRules1       = "1 rule (UDP, dst port), drop"
	mRules64      = "64 rules, the matching one last, drop"
	mRules256     = "256 rules, the matching one last, drop"
	mAllow100k    = "100k allow-list /32s, source not listed, drop"
	mSignature    = "1 rule (ICMP type and code, length, TTL, DSCP), drop"
	mFleetTBDrop  = "token bucket, scope: fleet, over limit (drop)"
	mFleetTBPass  = "token bucket, scope: fleet, under limit (pass)"
	mFleetFWDrop  = "fixed window, scope: fleet, over limit (drop)"
	mFleetFWPass  = "fixed window, scope: fleet, under limit (pass)"
	// The drop cases above are answered by the refused-until cache after
	// the first refusal; these reach the level itself.
	mFleetTBDropOff = "token bucket, scope: fleet, over limit (drop), refused cache off"
	mFleetFWDropOff = "fixed window, scope: fleet, over limit (drop), refused cache off"
)

// microBench measures every case on one pinned CPU, rounds interleaved:
// round 1 of every case, then round 2, so that a burst of other load on the
// machine spreads over all cases instead of skewing one.
func microBench(e *env, quick bool) (*microResults, error) {
	res := &microResults{Repeat: 1 << 20, Rounds: 7, CPU: 1}
	if quick {
		res.Repeat, res.Rounds = 1<<18, 3
	}
	var closers []func() error
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	udp4 := pktgen.UDP4(microSrc4, microDst4, 4000, 53, 18)
	udp6 := pktgen.UDP6(microSrc6, microDst6, 4000, 53, 18)

	add := func(c *microCase, setup func(c *microCase) (*ebpf.Program, error)) {
		res.Cases = append(res.Cases, c)
		if c.frame == nil {
			c.frame = append([]byte(nil), udp4...)
		}
		e.Logf("micro: loading %q", c.name)
		c.prog, c.err = setup(c)
	}
	limiter := func(opts maps.Options, yaml string, files map[string][]byte) func(*microCase) (*ebpf.Program, error) {
		return func(c *microCase) (*ebpf.Program, error) {
			l, err := loadLimiter(opts, yaml, files)
			if err != nil {
				return nil, err
			}
			closers = append(closers, l.Close)
			c.lim = l
			return l.Program(), nil
		}
	}

	add(&microCase{group: "Baseline", name: mBare, baseline: true, want: xdpDrop}, func(*microCase) (*ebpf.Program, error) {
		p, err := bareDrop()
		if err == nil {
			closers = append(closers, p.Close)
		}
		return p, err
	})
	add(&microCase{group: "Baseline", name: mParser, want: xdpDrop}, limiter(maps.Options{Clock: maps.ClockCoarse, BenchParseOnly: true}, "rules: []\n", nil))
	add(&microCase{group: "Baseline", name: mParserRotate, want: xdpDrop, rotate: 1 << 24,
		base: binary.BigEndian.Uint32(microBase.AsSlice())},
		limiter(maps.Options{Clock: maps.ClockCoarse, BenchParseOnly: true, BenchRotate: 1 << 24, BenchBase: microBase}, "rules: []\n", nil))
	add(&microCase{group: "Baseline", name: mParse, want: xdpPass}, limiter(maps.Options{Clock: maps.ClockCoarse}, "rules: []\n", nil))

	known := []struct {
		name, limit string
		clock       maps.Clock
		want        uint32
	}{
		{mTBDrop, tbDrop, maps.ClockCoarse, xdpDrop},
		{mTBPass, tbPass, maps.ClockCoarse, xdpPass},
		{mTBDropK, tbDrop, maps.ClockKtime, xdpDrop},
		{mTBPassK, tbPass, maps.ClockKtime, xdpPass},
		{mFWDrop, fwDrop, maps.ClockCoarse, xdpDrop},
		{mFWPass, fwPass, maps.ClockCoarse, xdpPass},
		{mSWDrop, swDrop, maps.ClockCoarse, xdpDrop},
		{mSWPass, swPass, maps.ClockCoarse, xdpPass},
		{mSLDrop, slDrop, maps.ClockCoarse, xdpDrop},
	}
	for _, k := range known {
		add(&microCase{group: "Known source (one IPv4 source, in the table)", name: k.name, want: k.want, warm: 1000},
			limiter(maps.Options{Clock: k.clock, MaxSources: 1 << 16}, oneRule(k.limit), nil))
	}
	add(&microCase{group: "Known source (one IPv4 source, in the table)", name: mSLPass, want: xdpPass, warm: 1000},
		func(c *microCase) (*ebpf.Program, error) {
			l, err := slidingLogPass()
			if err != nil {
				return nil, err
			}
			closers = append(closers, l.Close)
			c.lim = l
			return l.Program(), nil
		})
	add(&microCase{group: "Known source (one IPv4 source, in the table)", name: mIPv6, want: xdpDrop, warm: 1000,
		frame: append([]byte(nil), udp6...)},
		limiter(maps.Options{Clock: maps.ClockCoarse, MaxSources: 1 << 16}, oneRule(tbDrop), nil))
	// The extension-header walk: a global function and a loop, paid only by
	// packets that carry such headers.
	ext10 := pktgen.Frame{Src: microSrc6, Dst: microDst6, SrcPort: 4000, DstPort: 53, Payload: 18,
		Ext: slices.Repeat([]pktgen.ExtHeader{pktgen.ExtDestOpts}, 10)}.MustBuild()
	add(&microCase{group: "Known source (one IPv4 source, in the table)", name: mIPv6Ext10, want: xdpDrop, warm: 1000,
		frame: ext10},
		limiter(maps.Options{Clock: maps.ClockCoarse, MaxSources: 1 << 16}, oneRule(tbDrop), nil))
	// Two levels take the two-phase path: the global level is checked
	// first (aggregates first), then the source's.
	for _, a := range []struct {
		name, limit string
		want        uint32
	}{{mAggDrop, tbDrop, xdpDrop}, {mAggPass, tbPass, xdpPass}} {
		add(&microCase{group: "Known source (one IPv4 source, in the table)", name: a.name, want: a.want, warm: 1000},
			limiter(maps.Options{Clock: maps.ClockCoarse, MaxSources: 1 << 16}, oneRule(a.limit)+
				"    aggregate:\n      - key: global\n        limit: "+tbPass+"\n", nil))
	}

	// Many sources: the program rewrites the source before parsing.
	base := microBase
	base32 := binary.BigEndian.Uint32(base.AsSlice())
	manySrc := "Many sources (the program rotates the IPv4 source on every run)"
	add(&microCase{group: manySrc, name: mKnown64k, warm: 11 << 16, rotate: 1 << 16, base: base32,
		note: "64k sources each seen before: the cost of cache misses in a big table"},
		limiter(maps.Options{Clock: maps.ClockCoarse, MaxSources: 1 << 20, BenchRotate: 1 << 16, BenchBase: base}, oneRule(tbDrop), nil))
	for _, t := range []struct {
		name, limit, note string
		size              uint32
	}{
		{mNew64k, tbPass, "rotation over 2^24 addresses: every packet from a source never seen before", 1 << 16},
		{mNew1M, tbPass, "the same", 1 << 20},
		// A burst of one turns the admission sketch off for the level (a
		// source's first packet is already all it may send), so that every
		// packet pays the insert with eviction.
		{mNewTracked1M, tbDrop, "burst 1: tracked from its first packet, the admission sketch off", 1 << 20},
	} {
		add(&microCase{group: manySrc, name: t.name, want: xdpPass, warm: int(t.size + t.size>>4), rotate: 1 << 24, base: base32, note: t.note},
			limiter(maps.Options{Clock: maps.ClockCoarse, MaxSources: t.size, BenchRotate: 1 << 24, BenchBase: base}, oneRule(t.limit), nil))
	}

	// The same levels at fleet scope: each admission also adds to the
	// key's pending count for the next sync (an atomic add), and the first
	// one of a sync epoch reports the key; no engine runs, so the epoch
	// stays and the measured packets pay the add, not the report.
	fleetGroup := "Fleet scope (known source, the same limits as above)"
	for _, k := range []struct {
		name, limit string
		want        uint32
		noCache     bool
	}{
		{mFleetTBDrop, tbDrop, xdpDrop, false}, {mFleetTBPass, tbPass, xdpPass, false},
		{mFleetFWDrop, fwDrop, xdpDrop, false}, {mFleetFWPass, fwPass, xdpPass, false},
		{mFleetTBDropOff, tbDrop, xdpDrop, true}, {mFleetFWDropOff, fwDrop, xdpDrop, true},
	} {
		add(&microCase{group: fleetGroup, name: k.name, want: k.want, warm: 1000},
			limiter(maps.Options{Clock: maps.ClockCoarse, MaxSources: 1 << 16, NoRefusedCache: k.noCache}, fleetScoped(k.limit), nil))
	}

	rules := "Policy size (known source)"
	add(&microCase{group: rules, name: mRules1, want: xdpDrop, warm: 1000},
		limiter(maps.Options{Clock: maps.ClockCoarse, MaxSources: 1 << 16}, manyRules(1, tbDrop), nil))
	add(&microCase{group: rules, name: mRules64, want: xdpDrop, warm: 1000},
		limiter(maps.Options{Clock: maps.ClockCoarse, MaxSources: 1 << 16}, manyRules(64, tbDrop), nil))
	add(&microCase{group: rules, name: mRules256, want: xdpDrop, warm: 1000},
		limiter(maps.Options{Clock: maps.ClockCoarse, MaxSources: 1 << 16}, manyRules(256, tbDrop), nil))
	// Every signature field looked up: five more array lookups.
	add(&microCase{group: rules, name: mSignature, want: xdpDrop, warm: 1000,
		frame: pktgen.Frame{Src: microSrc4, Dst: microDst4, Proto: pktgen.ProtoICMP, TOS: 46 << 2, Payload: 18}.MustBuild()},
		limiter(maps.Options{Clock: maps.ClockCoarse, MaxSources: 1 << 16}, "rules:\n  - name: sig\n"+
			"    match: {protocol: icmp, icmp: {type: echo-request, code: 0}, length: 40-100, ttl: 60-64, dscp: [46]}\n"+
			"    limit: "+tbDrop+"\n", nil))
	add(&microCase{group: rules, name: mAllow100k, want: xdpDrop, warm: 1000},
		limiter(maps.Options{Clock: maps.ClockCoarse, MaxSources: 1 << 16},
			"allow: {files: [allow.netset]}\n"+oneRule(tbDrop), map[string][]byte{"allow.netset": allowList(100_000, 1)}))

	addDropPathCases(add, limiter, base32)
	addSynCookieCases(add, limiter)
	addStageCases(add, limiter, &closers, base32)
	addFloorCases(add, limiter, base32)

	for _, c := range res.Cases {
		if c.err == nil {
			c.advance(0)
		}
	}
	err := onPinnedThread(res.CPU, func() error {
		for _, c := range res.Cases {
			if c.err != nil || c.warm == 0 {
				continue
			}
			e.Logf("micro: warming %q (%d runs)", c.name, c.warm)
			if _, _, err := c.prog.Benchmark(c.frame, c.warm, nil); err != nil {
				c.err = err
			}
			c.advance(c.warm)
		}
		for _, c := range res.Cases {
			if c.err == nil && c.lim != nil {
				c.before, _ = c.lim.Counters()
			}
		}
		for round := range res.Rounds {
			e.Logf("micro: round %d of %d", round+1, res.Rounds)
			for _, c := range res.Cases {
				if c.err != nil {
					continue
				}
				ns, err := c.run(res.Repeat)
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
		for _, c := range res.Cases {
			c.countInserts()
		}
		if err := res.measureParserPairs(e, 3*res.Rounds); err != nil {
			return err
		}
		return res.measureFleetPairs(e, 3*res.Rounds)
	})
	if err == nil {
		res.measureTwoCPU(e, []string{mTBDrop, mTBDropOff, mTBPass, mAggDrop, mAggPass})
	}
	return res, err
}

// slidingLogPass loads a sliding log that admits every packet: slPass with
// its window cut to 1 ns, which no policy can write (64 packets take far
// longer than 1 ns), so that each packet takes the admitting path: the
// lock, the time stored, the count published.
func slidingLogPass() (*maps.Limiter, error) {
	img, _, err := compilePolicy(oneRule(slPass), nil)
	if err != nil {
		return nil, err
	}
	img.Rules[0].Levels[0].Params.P1 = 1
	return loadImage(maps.Options{Clock: maps.ClockCoarse, MaxSources: 1 << 16}, img)
}
