// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

// The micro benchmark's cases, group by group, in the order they are
// measured and reported.

// Names of the cases the targets refer to.
const (
	mBare         = "bare XDP_DROP"
	mParse        = "parse only (empty policy, unmatched)"
	mParser       = "the parser alone, then XDP_DROP (a benchmark knob)"
	mParserRotate = "the parser alone, the program rotating the source over 2^24 addresses"
	mTBDrop       = "token bucket, over limit (drop)"
	mTBPass       = "token bucket, under limit (pass)"
	mTBPassCap1k  = "token bucket, under limit (pass), capture: one in 1024 packets sampled"
	mTBPassCapAll = "token bucket, under limit (pass), capture: every packet sampled"
	mTBPassAuto   = "token bucket, under limit (pass), autopilot: one in 64 packets sampled (its default)"
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
	mKnown64kPass = "64k known sources, 1M table, token bucket, under limit (pass)"
	mNew64k       = "new source into a full 64k table"
	mNew1M        = "new source into a full 1M table"
	mNewTracked1M = "new source into a full 1M table, always inserted"
	mRules1       = "1 rule (UDP, dst port), drop"
	mRules64      = "64 rules, the matching one last, drop"
	mRules256     = "256 rules, the matching one last, drop"
	mAllow100k    = "100k allow-list /32s, source not listed, drop"
	mSignature    = "1 rule (ICMP type and code, length, TTL, DSCP), drop"
	mPayload1     = "1 rule matching 4 payload bytes (1 window), drop"
	mPayload8     = "8 rules on 8 payload windows, the last matching, drop"
	mFleetTBDrop  = "token bucket, scope: fleet, over limit (drop)"
	mFleetTBPass  = "token bucket, scope: fleet, under limit (pass)"
	// mFleetTBShare: the same with the level's local share set, the
	// key within it (its share's bucket charged instead of its pending
	// count).
	mFleetTBShare = "token bucket, scope: fleet, within its local share (pass)"
	mFleetFWDrop  = "fixed window, scope: fleet, over limit (drop)"
	mFleetFWPass  = "fixed window, scope: fleet, under limit (pass)"
	// The drop cases above are answered by the refused-until cache after
	// the first refusal; these reach the level itself.
	mFleetTBDropOff = "token bucket, scope: fleet, over limit (drop), refused cache off"
	mFleetFWDropOff = "fixed window, scope: fleet, over limit (drop), refused cache off"
)

// microSetup loads the micro cases: each one's program, and what to close
// when the benchmark is done.
type microSetup struct {
	e       *env
	res     *microResults
	closers []func() error
	udp4    []byte // the frame a case measures when it names none
}

func newMicroSetup(e *env, res *microResults) *microSetup {
	return &microSetup{e: e, res: res, udp4: pktgen.UDP4(microSrc4, microDst4, 4000, 53, 18)}
}

func (s *microSetup) close() {
	for _, c := range s.closers {
		c()
	}
}

// add appends c to the results and loads its program; a case that fails
// to load stays in the list, with its error, to be reported.
func (s *microSetup) add(c *microCase, setup func(c *microCase) (*ebpf.Program, error)) {
	s.res.Cases = append(s.res.Cases, c)
	if c.frame == nil {
		c.frame = append([]byte(nil), s.udp4...)
	}
	s.e.Logf("micro: loading %q", c.name)
	c.prog, c.err = setup(c)
}

// limiter is the setup of a case measuring a limiter loaded with yaml.
func (s *microSetup) limiter(opts maps.Options, yaml string, files map[string][]byte) func(*microCase) (*ebpf.Program, error) {
	return func(c *microCase) (*ebpf.Program, error) {
		l, err := loadLimiter(opts, yaml, files)
		if err != nil {
			return nil, err
		}
		return s.keep(c, l), nil
	}
}

// keep makes l the limiter of c, closed with the rest.
func (s *microSetup) keep(c *microCase, l *maps.Limiter) *ebpf.Program {
	s.closers = append(s.closers, l.Close)
	c.lim = l
	return l.Program()
}

// addAll adds every case, then starts each rotating case's frame at its
// first source.
func (s *microSetup) addAll() {
	base32 := binary.BigEndian.Uint32(microBase.AsSlice())
	s.addBaseline(base32)
	s.addKnownSource()
	s.addManySources(base32)
	s.addFleetScope()
	s.addPolicySize()
	addDropPathCases(s.add, s.limiter, base32)
	addSynCookieCases(s.add, s.limiter)
	addStageCases(s.add, s.limiter, &s.closers, base32)
	addFloorCases(s.add, s.limiter, base32)
	s.addConversations()
	for _, c := range s.res.Cases {
		if c.err == nil {
			c.advance(0)
		}
	}
}

func (s *microSetup) addBaseline(base32 uint32) {
	s.add(&microCase{group: "Baseline", name: mBare, baseline: true, want: xdpDrop}, func(*microCase) (*ebpf.Program, error) {
		p, err := bareDrop()
		if err == nil {
			s.closers = append(s.closers, p.Close)
		}
		return p, err
	})
	s.add(&microCase{group: "Baseline", name: mParser, want: xdpDrop}, s.limiter(maps.Options{Clock: maps.ClockCoarse, BenchParseOnly: true}, "rules: []\n", nil))
	s.add(&microCase{group: "Baseline", name: mParserRotate, want: xdpDrop, rotate: 1 << 24,
		base: base32},
		s.limiter(maps.Options{Clock: maps.ClockCoarse, BenchParseOnly: true, BenchRotate: 1 << 24, BenchBase: microBase}, "rules: []\n", nil))
	s.add(&microCase{group: "Baseline", name: mParse, want: xdpPass}, s.limiter(maps.Options{Clock: maps.ClockCoarse}, "rules: []\n", nil))
}

func (s *microSetup) addKnownSource() {
	group := "Known source (one IPv4 source, in the table)"
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
		s.add(&microCase{group: group, name: k.name, want: k.want, warm: 1000},
			s.limiter(maps.Options{Clock: k.clock, MaxSources: 1 << 16}, oneRule(k.limit), nil))
	}
	s.add(&microCase{group: group, name: mSLPass, want: xdpPass, warm: 1000},
		func(c *microCase) (*ebpf.Program, error) {
			l, err := slidingLogPass()
			if err != nil {
				return nil, err
			}
			return s.keep(c, l), nil
		})
	s.add(&microCase{group: group, name: mIPv6, want: xdpDrop, warm: 1000,
		frame: pktgen.UDP6(microSrc6, microDst6, 4000, 53, 18)},
		s.limiter(maps.Options{Clock: maps.ClockCoarse, MaxSources: 1 << 16}, oneRule(tbDrop), nil))
	// The extension-header walk: a global function and a loop, paid only by
	// packets that carry such headers.
	ext10 := pktgen.Frame{Src: microSrc6, Dst: microDst6, SrcPort: 4000, DstPort: 53, Payload: 18,
		Ext: slices.Repeat([]pktgen.ExtHeader{pktgen.ExtDestOpts}, 10)}.MustBuild()
	s.add(&microCase{group: group, name: mIPv6Ext10, want: xdpDrop, warm: 1000,
		frame: ext10},
		s.limiter(maps.Options{Clock: maps.ClockCoarse, MaxSources: 1 << 16}, oneRule(tbDrop), nil))
	// Sampling every verdict (capture:, autopilot:): off it is one flag test; on, a
	// random number per packet, and the frame's first bytes copied for
	// the sampled ones.
	for _, c := range []struct{ name, capture string }{
		{mTBPassCap1k, "capture: {sample: 1/1024}\n"}, {mTBPassCapAll, "capture: {sample: 1}\n"},
		{mTBPassAuto, "autopilot: {}\n"},
	} {
		s.add(&microCase{group: group, name: c.name, want: xdpPass, warm: 1000},
			s.limiter(maps.Options{Clock: maps.ClockCoarse, MaxSources: 1 << 16}, c.capture+oneRule(tbPass), nil))
	}
	// Two levels take the two-phase path: the global level is checked
	// first (aggregates first), then the source's.
	for _, a := range []struct {
		name, limit string
		want        uint32
	}{{mAggDrop, tbDrop, xdpDrop}, {mAggPass, tbPass, xdpPass}} {
		s.add(&microCase{group: group, name: a.name, want: a.want, warm: 1000},
			s.limiter(maps.Options{Clock: maps.ClockCoarse, MaxSources: 1 << 16}, perSourceAndGlobal(a.limit, tbPass), nil))
	}
}

// addManySources: the program rewrites the source before parsing.
func (s *microSetup) addManySources(base32 uint32) {
	group := "Many sources (the program rotates the IPv4 source on every run)"
	s.add(&microCase{group: group, name: mKnown64k, warm: 11 << 16, rotate: 1 << 16, base: base32,
		note: "64k sources each seen before: the cost of cache misses in a big table"},
		s.limiter(maps.Options{Clock: maps.ClockCoarse, MaxSources: 1 << 20, BenchRotate: 1 << 16, BenchBase: microBase}, oneRule(tbDrop), nil))
	// Admitted, as a host's clients are: each packet's state is another
	// source's, a cache miss in the table (its floor: floors.go).
	s.add(&microCase{group: group, name: mKnown64kPass, want: xdpPass, warm: 11 << 16, rotate: 1 << 16, base: base32,
		floor: mParserRotate, note: "64k sources each seen before, every packet admitted: what a host's clients pay"},
		s.limiter(maps.Options{Clock: maps.ClockCoarse, MaxSources: 1 << 20, BenchRotate: 1 << 16, BenchBase: microBase}, oneRule(tbPass), nil))
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
		s.add(&microCase{group: group, name: t.name, want: xdpPass, warm: int(t.size + t.size>>4), rotate: 1 << 24, base: base32, note: t.note},
			s.limiter(maps.Options{Clock: maps.ClockCoarse, MaxSources: t.size, BenchRotate: 1 << 24, BenchBase: microBase}, oneRule(t.limit), nil))
	}
}

// addFleetScope: the same levels at fleet scope. Each admission also adds
// to the key's pending count for the next sync (an atomic add), and the
// first one of a sync epoch reports the key; no engine runs, so the epoch
// stays and the measured packets pay the add, not the report.
func (s *microSetup) addFleetScope() {
	group := "Fleet scope (known source, the same limits as above)"
	for _, k := range []struct {
		name, limit string
		want        uint32
		noCache     bool
	}{
		{mFleetTBDrop, tbDrop, xdpDrop, false}, {mFleetTBPass, tbPass, xdpPass, false},
		{mFleetFWDrop, fwDrop, xdpDrop, false}, {mFleetFWPass, fwPass, xdpPass, false},
		{mFleetTBDropOff, tbDrop, xdpDrop, true}, {mFleetFWDropOff, fwDrop, xdpDrop, true},
	} {
		s.add(&microCase{group: group, name: k.name, want: k.want, warm: 1000},
			s.limiter(maps.Options{Clock: maps.ClockCoarse, MaxSources: 1 << 16, NoRefusedCache: k.noCache}, fleetScoped(k.limit), nil))
	}
	s.add(&microCase{group: group, name: mFleetTBShare, want: xdpPass, warm: 1000}, func(c *microCase) (*ebpf.Program, error) {
		l, err := loadLimiter(maps.Options{Clock: maps.ClockCoarse, MaxSources: 1 << 16}, fleetScoped(tbPass), nil)
		if err != nil {
			return nil, err
		}
		prog := s.keep(c, l)
		return prog, withinShare(l)
	})
}

// withinShare gives l's fleet token buckets a share of the whole limit,
// reported only past its whole burst: a key under the limit stays within.
func withinShare(l *maps.Limiter) error {
	fls, err := l.FleetLevels()
	if err != nil {
		return err
	}
	shares := map[uint32]maps.FleetShare{}
	for _, lv := range fls {
		shares[lv.StateID] = maps.FleetShare{Inc: lv.P1, Tol: lv.P2 >> maps.TimeShift}
	}
	return l.SetFleetShares(shares)
}

func (s *microSetup) addPolicySize() {
	group := "Policy size (known source)"
	known := maps.Options{Clock: maps.ClockCoarse, MaxSources: 1 << 16}
	s.add(&microCase{group: group, name: mRules1, want: xdpDrop, warm: 1000},
		s.limiter(known, manyRules(1, tbDrop), nil))
	s.add(&microCase{group: group, name: mRules64, want: xdpDrop, warm: 1000},
		s.limiter(known, manyRules(64, tbDrop), nil))
	s.add(&microCase{group: group, name: mRules256, want: xdpDrop, warm: 1000},
		s.limiter(known, manyRules(256, tbDrop), nil))
	// Every signature field looked up: five more array lookups.
	s.add(&microCase{group: group, name: mSignature, want: xdpDrop, warm: 1000,
		frame: pktgen.Frame{Src: microSrc4, Dst: microDst4, Proto: pktgen.ProtoICMP, TOS: 46 << 2, Payload: 18}.MustBuild()},
		s.limiter(known, "rules:\n  - name: sig\n"+
			"    match: {protocol: icmp, icmp: {type: echo-request, code: 0}, length: 40-100, ttl: 60-64, dscp: [46]}\n"+
			"    limit: "+tbDrop+"\n", nil))
	// Payload matches: a load and a hash lookup per window, and no flow
	// cache under them (the refused-until cache answers).
	payload := pktgen.Frame{Src: microSrc4, Dst: microDst4, SrcPort: 4000, DstPort: 9000,
		Data: []byte("\xde\xad\xbe\xef\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f")}.MustBuild()
	s.add(&microCase{group: group, name: mPayload1, want: xdpDrop, warm: 1000, frame: payload},
		s.limiter(known, "rules:\n  - name: magic\n"+
			"    match: {protocol: udp, payload: [{offset: 0, bytes: \"deadbeef\"}]}\n"+
			"    limit: "+tbDrop+"\n", nil))
	var eight strings.Builder
	eight.WriteString("rules:\n")
	for i := range 8 {
		// Windows at offsets 7 down to 0; no payload byte is aa, and
		// only the last rule's byte is the packet's.
		b := "aa"
		if i == 7 {
			b = "de"
		}
		fmt.Fprintf(&eight, "  - name: w%d\n    match: {protocol: udp, payload: [{offset: %d, bytes: \"%s\"}]}\n    limit: %s\n",
			i, 7-i, b, tbDrop)
	}
	s.add(&microCase{group: group, name: mPayload8, want: xdpDrop, warm: 1000, frame: payload},
		s.limiter(known, eight.String(), nil))
	s.add(&microCase{group: group, name: mAllow100k, want: xdpDrop, warm: 1000},
		s.limiter(known,
			"allow: {files: [allow.netset]}\n"+oneRule(tbDrop), map[string][]byte{"allow.netset": allowList(100_000, 1)}))
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
