package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/xdplimit/xdplimit/internal/command"
	"github.com/xdplimit/xdplimit/internal/netns"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

// A veth pair with a receiving end that one family of configurations uses.
// Each netfilter variant gets its own pair and namespaces: a netfilter
// table, once created in a namespace, stays hooked into it (iptables-legacy
// tables are never unregistered), and would tax the configurations measured
// there after it.
type vethPair struct {
	v     *netns.Veth
	frame []byte
	// sink is the XDP program kept on the receiver of the netfilter pairs:
	// without one, live frames vanish while counted as sent (pktgen.Send).
	sink *pktgen.Sink
}

func (p *vethPair) close() {
	if p.sink != nil {
		p.sink.Close()
	}
}

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

// attachProg attaches prog natively to the receiving end of p; closing the
// link detaches it.
func (p *vethPair) attachProg(prog *ebpf.Program) (link.Link, error) {
	var lk link.Link
	err := p.v.PeerNS.Do(func() error {
		var err error
		lk, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: p.v.PeerIndex, Flags: link.XDPDriverMode})
		return err
	})
	return lk, err
}

// xdpRx sums the frames the receiving end's XDP program has seen, over its
// queues, from the veth driver's own counters (ethtool -S).
func (p *vethPair) xdpRx() (uint64, error) {
	var sum uint64
	err := p.v.PeerNS.Do(func() error {
		out, err := command.Run(10*time.Second, "ethtool", "-S", p.v.PeerName)
		if err != nil {
			return fmt.Errorf("ethtool -S %s: %v: %s", p.v.PeerName, err, out)
		}
		s := bufio.NewScanner(bytes.NewReader(out))
		found := false
		for s.Scan() {
			k, v, ok := strings.Cut(strings.TrimSpace(s.Text()), ":")
			if !ok || !strings.HasPrefix(k, "rx_queue_") || !strings.HasSuffix(k, "_xdp_packets") {
				continue
			}
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return fmt.Errorf("ethtool -S %s: %q: %v", p.v.PeerName, s.Text(), err)
			}
			sum += n
			found = true
		}
		if !found {
			return fmt.Errorf("ethtool -S %s has no rx_queue_*_xdp_packets", p.v.PeerName)
		}
		return nil
	})
	return sum, err
}

// settle waits until the receiver's counter stops moving: frames still in
// the veth's rings are judged after Send returns.
func (p *vethPair) settle() (uint64, error) {
	prev, err := p.xdpRx()
	for i := 0; err == nil && i < 50; i++ {
		time.Sleep(20 * time.Millisecond)
		var cur uint64
		if cur, err = p.xdpRx(); err == nil && cur == prev {
			return cur, nil
		}
		prev = cur
	}
	return prev, err
}

// softirqdTime is the CPU time of the ksoftirqd threads so far, from
// schedstat (ns; /proc/PID/stat counts 10 ms ticks).
func softirqdTime() (time.Duration, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	var sum time.Duration
	for _, ent := range ents {
		if ent.Name()[0] < '0' || ent.Name()[0] > '9' {
			continue
		}
		comm, err := os.ReadFile("/proc/" + ent.Name() + "/comm")
		if err != nil || !strings.HasPrefix(string(comm), "ksoftirqd/") {
			continue
		}
		b, err := os.ReadFile("/proc/" + ent.Name() + "/schedstat")
		if err != nil {
			return 0, err
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			return 0, fmt.Errorf("%s/schedstat: %q", ent.Name(), b)
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, err
		}
		sum += time.Duration(ns)
	}
	return sum, nil
}

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
	// of 21 runs fit the time budget.
	res := &macroResults{Count: 4_000_000, Reps: 5, Scenarios: macroScenarios, LoadBefore: loadavg()}
	if quick {
		res.Count, res.Reps = 500_000, 2
	}
	start := time.Now()
	defer func() { res.LoadAfter, res.Duration = loadavg(), time.Since(start) }()

	newPair := func(tag string, subnet int) (*vethPair, error) {
		v, err := e.vethPair("xb"+tag+"0", "xb"+tag+"1", subnet)
		if err != nil {
			return nil, err
		}
		return &vethPair{v: v, frame: pktgen.SetMACs(pktgen.UDP4(v.Addr, v.PeerAddr, 40000, 9, 18), v.MAC, v.PeerMAC)}, nil
	}
	xdpPair, err := newPair("x", 11)
	if err != nil {
		return res, err
	}
	defer xdpPair.close()

	sink := func(mode pktgen.SinkMode) func(int) (func() error, error) {
		return func(int) (func() error, error) {
			s, err := pktgen.AttachSink(xdpPair.v.PeerNS.Path(), xdpPair.v.PeerName, mode)
			if err != nil {
				return nil, err
			}
			return s.Close, nil
		}
	}
	res.Configs = append(res.Configs,
		&macroConfig{id: "stack", label: "stack only (XDP_PASS, no filter)", pair: xdpPair, setup: sink(pktgen.SinkPass)},
		&macroConfig{id: "xdp-drop", label: "bare XDP_DROP", pair: xdpPair, setup: sink(pktgen.SinkDrop)},
	)
	// xdplimit's program with opts and the policy, attached for the run.
	limiterConfig := func(id, label string, opts maps.Options, policy string) *macroConfig {
		c := &macroConfig{id: id, label: label, pair: xdpPair}
		c.setup = func(int) (func() error, error) {
			l, err := loadLimiter(opts, policy, nil)
			if err != nil {
				return nil, err
			}
			lk, err := xdpPair.attachProg(l.Program())
			if err != nil {
				l.Close()
				return nil, err
			}
			c.limiter = l
			return func() error {
				c.limiter = nil
				return errors.Join(lk.Close(), l.Close())
			}, nil
		}
		return c
	}
	// The floor under every verdict on veth, as in the micro benchmark:
	// the program reads and checks each frame's headers as the stack would
	// (so that no packet the stack delivers escapes the rules), then drops it.
	res.Configs = append(res.Configs, limiterConfig(macroParser, "the parser alone, then XDP_DROP",
		maps.Options{Clock: maps.ClockCoarse, BenchParseOnly: true}, xdplimitPolicy("token_bucket", false)))
	for _, alg := range macroAlgs {
		res.Configs = append(res.Configs, limiterConfig(alg.id, "xdplimit, "+strings.ReplaceAll(alg.name, "_", " "),
			maps.Options{Clock: maps.ClockCoarse}, xdplimitPolicy(alg.name, false)))
	}
	// The global level written first, on the spoofed flood only, where
	// it refuses: the single-source and 64k floods would say the same
	// of the per-source level, at the cost of the section's time budget.
	for _, alg := range macroAlgs {
		c := limiterConfig(alg.globalFirst, "xdplimit, "+strings.ReplaceAll(alg.name, "_", " ")+", global level written first",
			maps.Options{Clock: maps.ClockCoarse}, xdplimitPolicy(alg.name, true))
		c.only = "16M"
		res.Configs = append(res.Configs, c)
	}

	// The netfilter configurations pass every frame to the stack in XDP
	// and let netfilter limit.
	nfPair := func(tag string, subnet int) (*vethPair, error) {
		p, err := newPair(tag, subnet)
		if err != nil {
			return nil, err
		}
		if p.sink, err = pktgen.AttachSink(p.v.PeerNS.Path(), p.v.PeerName, pktgen.SinkPass); err != nil {
			return nil, err
		}
		return p, nil
	}
	if p, err := nfPair("n", 12); err != nil {
		res.SetupErrors = append(res.SetupErrors, fmt.Sprintf("nftables: %v", err))
	} else {
		defer p.close()
		res.Configs = append(res.Configs, &macroConfig{id: "nft-set", label: "nftables dynamic set + global limit", pair: p,
			setup: func(int) (func() error, error) { return nftSetup(p.v.PeerNS) }})
	}
	if p, err := nfPair("i", 13); err != nil {
		res.SetupErrors = append(res.SetupErrors, fmt.Sprintf("iptables-legacy: %v", err))
	} else {
		defer p.close()
		res.Configs = append(res.Configs, &macroConfig{id: "hashlimit", label: "iptables-legacy hashlimit srcip + global", pair: p,
			setup: func(run int) (func() error, error) { return hashlimitSetup(p.v.PeerNS, run) }})
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

	// Interleaved: every configuration once per scenario per repetition,
	// the configurations' order rotated each repetition.
	run := 0
	for rep := range res.Reps {
		for _, s := range res.Scenarios {
			for i := range res.Configs {
				c := res.Configs[(i+rep)%len(res.Configs)]
				if err := e.ctx.Err(); err != nil {
					return res, err
				}
				run++
				if !c.runs(s.id) {
					continue
				}
				cell := c.cells[s.id]
				if len(cell.errs) >= 2 {
					continue // broken here: do not spend the time budget on it
				}
				if err := macroRun(e, g, c, s, res.Count, run, cell); err != nil {
					e.Logf("macro: %s / %s: %v", c.id, s.id, err)
					cell.errs = append(cell.errs, errString(err))
				}
			}
		}
	}
	return res, nil
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

// timedFlood sends count frames of p's from both CPUs and waits until the
// receiver has taken them in. It returns the send, the frames the
// receiving end's XDP program saw and the ksoftirqd time meanwhile
// (softirq work deferred there, which the senders' CPU time misses).
func (p *vethPair) timedFlood(e *env, g *pktgen.Generator, count uint64) (r pktgen.Result, received uint64, softirqd time.Duration, err error) {
	// Bounded twice: by the packet count and by a hard timeout far above
	// the slowest configuration's time for it.
	const hard = 90 * time.Second
	r, received, softirqd, err = p.floodFor(e, g, count, hard)
	if err == nil && r.Sent < count {
		err = fmt.Errorf("send: %d of %d frames within the hard timeout of %v", r.Sent, count, hard)
	}
	return r, received, softirqd, err
}

// errFloodOver is the cause that ends a flood's time (floodFor).
var errFloodOver = errors.New("the flood's time is over")

// floodFor is timedFlood for at most d: a flood that d ends is no error
// (the drop log's flood runs for a time, its count only a bound).
func (p *vethPair) floodFor(e *env, g *pktgen.Generator, count uint64, d time.Duration) (r pktgen.Result, received uint64, softirqd time.Duration, err error) {
	rx0, err := p.xdpRx()
	if err != nil {
		return r, 0, 0, err
	}
	soft0, err := softirqdTime()
	if err != nil {
		return r, 0, 0, err
	}
	ctx, cancel := context.WithTimeoutCause(e.ctx, d, errFloodOver)
	defer cancel()
	if r, err = g.Send(ctx, p.v.NS.Path(), p.v.Name, p.frame, count, 0, 1); err != nil && !errors.Is(err, errFloodOver) {
		return r, 0, 0, fmt.Errorf("send: %w", err)
	}
	rx1, err := p.settle()
	if err != nil {
		return r, 0, 0, err
	}
	soft1, err := softirqdTime()
	if err != nil {
		return r, 0, 0, err
	}
	return r, rx1 - rx0, soft1 - soft0, nil
}
