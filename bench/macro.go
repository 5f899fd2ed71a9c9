// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

type macroScenario struct {
	id, label string
	sources   pktgen.Sources
}

var macroScenarios = []macroScenario{
	{"single", "single-source flood", pktgen.Sources{Mode: pktgen.Fixed}},
	{"64k", "64k sources", pktgen.Sources{Mode: pktgen.Sequential, First: netip.MustParseAddr("10.1.0.0"), Count: 1 << 16}},
	{"16M", "16M random sources", pktgen.Sources{Mode: pktgen.Random, First: netip.MustParseAddr("10.0.0.0"), Mask: 1<<24 - 1}},
}

// macroParser is the configuration of the parser alone (a benchmark knob).
const macroParser = "parser"

// macroAlgs are xdplimit's configurations on veth: one per algorithm with
// the rule written per-source level first (id), and one with the global
// level written first (globalFirst).
var macroAlgs = []struct{ id, globalFirst, name string }{
	{"xdplimit-tb", "gfirst-tb", "token_bucket"},
	{"xdplimit-fw", "gfirst-fw", "fixed_window"},
	{"xdplimit-sw", "gfirst-sw", "sliding_window"},
}

type macroConfig struct {
	id, label string
	pair      *vethPair
	// setup makes the configuration's state fresh and returns its
	// teardown; run numbers the runs, for names that must not repeat.
	setup func(run int) (func() error, error)
	// limiter is the configuration's xdplimit while it runs, for its counters.
	limiter *maps.Limiter
	// only, when set, is the one scenario the configuration runs in.
	only  string
	cells map[string]*macroCell
}

// runs says whether the configuration is measured in scenario s.
func (c *macroConfig) runs(s string) bool { return c.only == "" || c.only == s }

type macroCell struct {
	mpps sample // frames that reached the receiver's XDP program, per second of the send
	// The same frames per second of CPU time spent on them: the sending
	// threads (which also run the receiver's NAPI in their softirq) and
	// ksoftirqd (softirq work deferred there). Time other programs took
	// from us on these shared CPUs does not dilute it.
	cpuMpps sample
	toStack sample // share of them that reached UDP (passed every filter)
	lost    sample // share the generator sent that never reached the receiver
	errs    []string
}

type macroResults struct {
	Count       uint64
	Reps        int
	Configs     []*macroConfig
	Scenarios   []macroScenario
	LoadBefore  string
	LoadAfter   string
	SetupErrors []string
	Duration    time.Duration
	// Conv is the conversation checks' floods (macro_conv.go), measured
	// in the same repetitions.
	Conv *convVeth
}

func (r *macroResults) cell(config, scenario string) *macroCell {
	for _, c := range r.Configs {
		if c.id == config {
			return c.cells[scenario]
		}
	}
	return nil
}

// ratio is config's median rate over base's in one scenario (0 when
// either is missing); cpu selects the rate per CPU-second.
func (r *macroResults) ratio(config, base, scenario string, cpu bool) float64 {
	a, b := r.cell(config, scenario), r.cell(base, scenario)
	if a == nil || b == nil {
		return 0
	}
	x, y := a.mpps, b.mpps
	if cpu {
		x, y = a.cpuMpps, b.cpuMpps
	}
	if len(x) == 0 || len(y) == 0 || y.median() == 0 {
		return 0
	}
	return x.median() / y.median()
}

// xdplimitPolicy is the veth comparison's policy in xdplimit's language, for
// one algorithm: the same per-source limit and global limit as the
// netfilter configurations (windows: the same count per second). The rule
// names its per-source level first, as users write it; globalFirst writes
// the global level as the rule's own and the per-source one as its
// aggregate. The compiler evaluates a global level first either way
// (compiler.rank): the two orderings measure that the order a user writes
// costs nothing.
func xdplimitPolicy(alg string, globalFirst bool) string {
	limit := func(rate, burst int) string {
		switch alg {
		case "token_bucket":
			return fmt.Sprintf("{algorithm: token_bucket, rate: %d/s, burst: %d}", rate, burst)
		default:
			return fmt.Sprintf("{algorithm: %s, packets: %d, window: 1s}", alg, rate)
		}
	}
	own, ownKey := limit(perSourceRate, perSourceBurst), "src_ip"
	agg, aggKey := limit(globalRate, globalBurst), "global"
	if globalFirst {
		own, ownKey, agg, aggKey = agg, aggKey, own, ownKey
	}
	return fmt.Sprintf(`rules:
  - name: flood
    match: {protocol: udp}
    key: %s
    limit: %s
    aggregate:
      - key: %s
        limit: %s
`, ownKey, own, aggKey, agg)
}

// macroAdmit is the configuration admitting every frame to the stack;
// macroAdmitFloor its floor program's.
const (
	macroAdmit      = "xdplimit-admit"
	macroAdmitFloor = "floor-admit"
)

// admitPolicy is the flood's rule with limits no veth flood reaches.
const admitPolicy = `rules:
  - name: flood
    match: {protocol: udp}
    key: src_ip
    limit: {algorithm: token_bucket, rate: 100M/s, burst: 100000000}
    aggregate:
      - key: global
        limit: {algorithm: token_bucket, rate: 100M/s, burst: 100000000}
`

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// macroBench floods veth pairs with the live-frames generator from both
// CPUs and measures how many frames per second each configuration of the
// receiver takes in. The generator and the receiver share the CPUs (the
// peer's NAPI runs in the sender's softirq), so every rate is the rate of
// generator plus receiver, and the ratios to bare XDP_DROP understate the
// differences between receivers; the order of the configurations is still
// the order of their per-packet cost.
func macroBench(e *env, quick bool) (*macroResults, error) {
	// 4M frames take 0.35 s at bare XDP_DROP's rate and 2-7 s up the stack
	// on this VM (four times that when other work loads it): 5 repetitions
	// of 21 runs, and the conversation floods' 9, fit the time budget.
	res := &macroResults{Count: 4_000_000, Reps: 5, Scenarios: macroScenarios, LoadBefore: loadavg()}
	if quick {
		res.Count, res.Reps = 500_000, 2
	}
	start := time.Now()
	defer func() { res.LoadAfter, res.Duration = loadavg(), time.Since(start) }()

	xdpPair, err := newMacroPair(e, "x", 11)
	if err != nil {
		return res, err
	}
	defer xdpPair.close()
	res.Configs = xdpConfigs(xdpPair)
	closeNetfilter := res.addNetfilterConfigs(e)
	defer closeNetfilter()
	if conv, closeConv, err := newConvVeth(e); err != nil {
		res.SetupErrors = append(res.SetupErrors, fmt.Sprintf("conversation checks: %v", err))
	} else {
		res.Conv = conv
		defer closeConv()
	}
	for _, c := range res.Configs {
		c.cells = map[string]*macroCell{}
		for _, s := range res.Scenarios {
			c.cells[s.id] = &macroCell{}
		}
	}

	g, err := pktgen.Open(pktgen.Config{Timeout: 60 * time.Second})
	if err != nil {
		return res, err
	}
	defer g.Close()
	return res, res.runAll(e, g)
}

// newMacroPair is a veth pair of the family tag, its frame addressed from
// one end to the other.
func newMacroPair(e *env, tag string, subnet int) (*vethPair, error) {
	v, err := e.vethPair("xb"+tag+"0", "xb"+tag+"1", subnet)
	if err != nil {
		return nil, err
	}
	return &vethPair{v: v, frame: pktgen.SetMACs(pktgen.UDP4(v.Addr, v.PeerAddr, 40000, 9, 18), v.MAC, v.PeerMAC)}, nil
}

// xdpConfigs are the configurations of an XDP program alone on pair's
// receiver: the stack, bare XDP_DROP, the parser and xdplimit's.
func xdpConfigs(pair *vethPair) []*macroConfig {
	sink := func(mode pktgen.SinkMode) func(int) (func() error, error) {
		return func(int) (func() error, error) { return pair.attachSink(mode) }
	}
	configs := []*macroConfig{
		{id: "stack", label: "stack only (XDP_PASS, no filter)", pair: pair, setup: sink(pktgen.SinkPass)},
		{id: "xdp-drop", label: "bare XDP_DROP", pair: pair, setup: sink(pktgen.SinkDrop)},
	}
	// The floor under every verdict on veth, as in the micro benchmark:
	// the program reads and checks each frame's headers as the stack would
	// (so that no packet the stack delivers escapes the rules), then drops it.
	configs = append(configs, limiterConfig(pair, macroParser, "the parser alone, then XDP_DROP",
		maps.Options{Clock: maps.ClockCoarse, BenchParseOnly: true}, xdplimitPolicy("token_bucket", false)))
	for _, alg := range macroAlgs {
		configs = append(configs, limiterConfig(pair, alg.id, "xdplimit, "+strings.ReplaceAll(alg.name, "_", " "),
			maps.Options{Clock: maps.ClockCoarse}, xdplimitPolicy(alg.name, false)))
	}
	// The global level written first, on the spoofed flood only, where
	// it refuses: the single-source and 64k floods would say the same
	// of the per-source level, at the cost of the section's time budget.
	// Every frame admitted to the stack, beside the stack alone (a bare
	// XDP_PASS): what 64-byte traffic the host wants pays. 64k known
	// sources, each with its state, under per-source and global limits
	// far above the flood.
	admit := limiterConfig(pair, macroAdmit, "xdplimit, token bucket, every frame admitted",
		maps.Options{Clock: maps.ClockCoarse}, admitPolicy)
	admit.only = "64k"
	configs = append(configs, admit)
	// Its floor (bpf/floor.h): after the parser, each frame's entry found
	// in the same shared state table, a GCRA step, the pass counted. The
	// table's misses are any exact limiter's; the floor says how near the
	// stack alone the machine lets one come.
	admitFloor := limiterConfig(pair, macroAdmitFloor, "floor: every frame admitted through the state table",
		maps.Options{Clock: maps.ClockCoarse, BenchFloor: maps.FloorAdmitted}, admitPolicy)
	admitFloor.only = "64k"
	configs = append(configs, admitFloor)
	for _, alg := range macroAlgs {
		c := limiterConfig(pair, alg.globalFirst, "xdplimit, "+strings.ReplaceAll(alg.name, "_", " ")+", global level written first",
			maps.Options{Clock: maps.ClockCoarse}, xdplimitPolicy(alg.name, true))
		c.only = "16M"
		configs = append(configs, c)
	}
	return configs
}

// limiterConfig is xdplimit's program with opts and the policy, attached
// to pair's receiver for the run.
func limiterConfig(pair *vethPair, id, label string, opts maps.Options, policy string) *macroConfig {
	c := &macroConfig{id: id, label: label, pair: pair}
	c.setup = func(int) (func() error, error) {
		l, detach, err := pair.attachLimiter(opts, policy)
		if err != nil {
			return nil, err
		}
		c.limiter = l
		return func() error {
			c.limiter = nil
			return detach()
		}, nil
	}
	return c
}

// addNetfilterConfigs adds the netfilter configurations, which pass every
// frame to the stack in XDP and let netfilter limit, each on a pair of its
// own; one that cannot be set up is a setup error, not a failure. The
// returned function closes their pairs.
func (r *macroResults) addNetfilterConfigs(e *env) (closeAll func()) {
	nfPair := func(tag string, subnet int) (*vethPair, error) {
		p, err := newMacroPair(e, tag, subnet)
		if err != nil {
			return nil, err
		}
		if p.sink, err = pktgen.AttachSink(p.v.PeerNS.Path(), p.v.PeerName, pktgen.SinkPass); err != nil {
			return nil, err
		}
		return p, nil
	}
	var pairs []*vethPair
	closeAll = func() {
		for _, p := range slices.Backward(pairs) {
			p.close()
		}
	}
	if p, err := nfPair("n", 12); err != nil {
		r.SetupErrors = append(r.SetupErrors, fmt.Sprintf("nftables: %v", err))
	} else {
		pairs = append(pairs, p)
		r.Configs = append(r.Configs, &macroConfig{id: "nft-set", label: "nftables dynamic set + global limit", pair: p,
			setup: func(int) (func() error, error) { return nftSetup(p.v.PeerNS) }})
	}
	if p, err := nfPair("i", 13); err != nil {
		r.SetupErrors = append(r.SetupErrors, fmt.Sprintf("iptables-legacy: %v", err))
	} else {
		pairs = append(pairs, p)
		r.Configs = append(r.Configs, &macroConfig{id: "hashlimit", label: "iptables-legacy hashlimit srcip + global", pair: p,
			setup: func(run int) (func() error, error) { return hashlimitSetup(p.v.PeerNS, run) }})
	}
	return closeAll
}

// runAll measures every configuration once per scenario per repetition,
// interleaved, the configurations' order rotated each repetition.
func (r *macroResults) runAll(e *env, g *pktgen.Generator) error {
	run := 0
	for rep := range r.Reps {
		for _, s := range r.Scenarios {
			for i := range r.Configs {
				c := r.Configs[(i+rep)%len(r.Configs)]
				if err := e.ctx.Err(); err != nil {
					return err
				}
				run++
				if !c.runs(s.id) {
					continue
				}
				cell := c.cells[s.id]
				if len(cell.errs) >= 2 {
					continue // broken here: do not spend the time budget on it
				}
				if err := macroRun(e, g, c, s, r.Count, run, cell); err != nil {
					e.Logf("macro: %s / %s: %v", c.id, s.id, err)
					cell.errs = append(cell.errs, errString(err))
				}
			}
		}
		if r.Conv != nil {
			if err := r.Conv.runRep(e, g, r.Count, rep); err != nil {
				return err
			}
		}
	}
	return nil
}

func macroRun(e *env, g *pktgen.Generator, c *macroConfig, s macroScenario, count uint64, run int, cell *macroCell) error {
	teardown, err := c.setup(run)
	if err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	defer func() {
		if err := teardown(); err != nil {
			e.Logf("macro: %s teardown: %v", c.id, err)
		}
	}()
	p := c.pair
	snmp0, err := p.v.PeerNS.Counters()
	if err != nil {
		return err
	}
	if err := g.SetSources(s.sources); err != nil {
		return err
	}
	r, received, softirqd, err := p.timedFlood(e, g, count)
	if err != nil {
		return err
	}
	snmp1, err := p.v.PeerNS.Counters()
	if err != nil {
		return err
	}
	rx := float64(received)
	if rx == 0 || r.Elapsed <= 0 {
		return fmt.Errorf("the receiver saw no frames (sent %d)", r.Sent)
	}
	d := snmp1.Delta(snmp0)
	mpps := rx / r.Elapsed.Seconds() / 1e6
	cell.mpps = append(cell.mpps, mpps)
	cpu := r.CPUTime + softirqd
	if cpu > 0 {
		cell.cpuMpps = append(cell.cpuMpps, rx/cpu.Seconds()/1e6)
	}
	cell.toStack = append(cell.toStack, float64(d.UDPNoPorts+d.UDPInDatagrams)/rx)
	cell.lost = append(cell.lost, max(0, 1-rx/float64(r.Sent)))
	extra := ""
	if c.limiter != nil {
		if st, err := c.limiter.RuleStats(); err == nil && len(st) > 0 {
			extra = fmt.Sprintf(", xdplimit passed %d dropped %d", st[0].Verdicts[maps.VerdictPass].Packets, st[0].Verdicts[maps.VerdictDrop].Packets)
		}
	}
	e.Logf("macro: %-12s %-7s %6.3f Mpps, %6.3f per CPU-s (sent %d in %v, CPU %v + ksoftirqd %v, received %d, %d reached UDP%s)",
		c.id, s.id, mpps, rx/cpu.Seconds()/1e6, r.Sent, r.Elapsed.Round(time.Millisecond), r.CPUTime.Round(time.Millisecond),
		softirqd.Round(time.Millisecond), uint64(rx), d.UDPNoPorts+d.UDPInDatagrams, extra)
	return nil
}
