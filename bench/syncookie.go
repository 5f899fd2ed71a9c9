// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/internal/netns"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

// SYN cookies (docs/policy.md): what a SYN answered with a cookie costs,
// per packet under BPF_PROG_TEST_RUN beside a drop by the same rule and the
// parser alone (micro rows), and per CPU-second on a veth beside bare
// XDP_DROP and the kernel answering the same flood with its own cookies
// (this section).

const (
	xdpTX = 3

	mSynCookie = "SYN answered with a cookie (the SYN-ACK built in place, XDP_TX)"
	mSynDrop   = "SYN dropped by the same rule (action drop)"
	mSynParser = "SYN, the parser alone, then XDP_DROP"

	synPort = 8080
)

// synRule is one rule on SYNs to synPort, with the per-source limit, the
// global one if any, and the action given.
func synRule(limit, global, action string) string {
	y := fmt.Sprintf("rules:\n  - name: syn\n    match: {protocol: tcp, dst_ports: [%d], tcp_flags: [syn]}\n    limit: %s\n", synPort, limit)
	if global != "" {
		y += "    aggregate:\n      - key: global\n        limit: " + global + "\n"
	}
	return y + "    action: " + action + "\n"
}

// synFrame is a SYN as Linux sends one (MSS, SACK, timestamps, window
// scale), 74 bytes; its SYN-ACK is as long, so the frame restore never
// resizes the buffer.
func synFrame(src, dst netip.Addr) []byte {
	return pktgen.Frame{Src: src, Dst: dst, Proto: pktgen.ProtoTCP, SrcPort: 40000, DstPort: synPort, TCPSeq: 1000,
		TCPOptions: []pktgen.TCPOption{pktgen.OptMSS(1460), pktgen.OptSACK(), pktgen.OptTimestamps(12345, 0),
			pktgen.OptNOP(), pktgen.OptWScale(7)}}.MustBuild()
}

// addSynCookieCases adds the micro rows: one known source over its limit,
// the SYN restored before each run (BPF_PROG_TEST_RUN re-runs one buffer,
// which an answered SYN leaves a SYN-ACK); the drop and parser rows pay the
// same restore, so the three compare like with like.
func addSynCookieCases(add func(*microCase, func(*microCase) (*ebpf.Program, error)),
	limiter func(maps.Options, string, map[string][]byte) func(*microCase) (*ebpf.Program, error)) {
	group := "SYN cookies: a known source's SYN over its limit, restored before each run (`xdpl_bench_frame`)"
	syn := synFrame(microSrc4, microDst4)
	opts := maps.Options{Clock: maps.ClockCoarse, MaxSources: 1 << 16, BenchFrame: syn}
	parser := opts
	parser.BenchParseOnly = true
	for _, c := range []struct {
		name, action string
		opts         maps.Options
		want         uint32
	}{
		{mSynCookie, "syncookie", opts, xdpTX},
		{mSynDrop, "drop", opts, xdpDrop},
		{mSynParser, "syncookie", parser, xdpDrop},
	} {
		add(&microCase{group: group, name: c.name, want: c.want, warm: 1000, frame: append([]byte(nil), syn...), floor: mSynParser},
			limiter(c.opts, synRule(tbDrop, "", c.action), nil))
	}
}

// synConfig is one receiver of the veth SYN flood.
type synConfig struct {
	id, label string
	setup     func() (func() error, error)
	// handled counts what the configuration did with the flood's SYNs
	// so far: answered, or dropped for the bare XDP_DROP.
	handled func() (uint64, error)
	rate    sample // SYNs handled per second of the send
	cpuRate sample // per CPU-second (the sending threads, which run the receiver in their softirq, and ksoftirqd)
	lost    sample // the share the generator sent that the receiver's full ring dropped
	errs    []string
}

type synResults struct {
	Count    uint64
	Reps     int
	Configs  []*synConfig
	Duration time.Duration
}

func (r *synResults) find(id string) *synConfig {
	for _, c := range r.Configs {
		if c.id == id {
			return c
		}
	}
	return nil
}

// cpuRatio is a's median SYNs per CPU-second over b's (0 when missing).
func (r *synResults) cpuRatio(a, b string) float64 {
	x, y := r.find(a), r.find(b)
	if x == nil || y == nil || len(x.cpuRate) == 0 || y.cpuRate.median() == 0 {
		return 0
	}
	return x.cpuRate.median() / y.cpuRate.median()
}

// synCookieBench floods a veth with SYNs from 16M random sources from both
// CPUs and counts what each receiver does with them: bare XDP_DROP drops
// them; xdplimit's rule (the veth comparison's per-source and global
// limits) drops or answers them; the kernel, with no filter in XDP and
// tcp_syncookies=2 under a listener, answers them with its own cookies.
// The SYN-ACKs go back out of the veth, by XDP_TX or by the kernel's route
// (a default route through the sender's end, with a permanent neighbour
// entry: the sender's end drops everything in XDP, ARP included).
func synCookieBench(e *env, quick bool) (*synResults, error) {
	res := &synResults{Count: 2_000_000, Reps: 5}
	if quick {
		res.Count, res.Reps = 300_000, 2
	}
	start := time.Now()
	defer func() { res.Duration = time.Since(start) }()

	p, err := synPair(e)
	if err != nil {
		return res, err
	}
	defer p.close()
	ln, err := listenerSide(p.v)
	if err != nil {
		return res, err
	}
	defer ln.Close()
	res.Configs = synConfigs(p)

	g, err := pktgen.Open(pktgen.Config{Timeout: 60 * time.Second, Sources: macroScenarios[2].sources})
	if err != nil {
		return res, err
	}
	defer g.Close()
	return res, res.runAll(e, g, p)
}

// synPair is the veth the SYNs cross, its sender's end dropping in XDP
// whatever comes back.
func synPair(e *env) (*vethPair, error) {
	v, err := e.vethPair("xbs0", "xbs1", 17)
	if err != nil {
		return nil, err
	}
	p := &vethPair{v: v, frame: pktgen.SetMACs(synFrame(macroScenarios[2].sources.First, v.PeerAddr), v.MAC, v.PeerMAC)}
	if p.sink, err = pktgen.AttachSink(v.NS.Path(), v.Name, pktgen.SinkDrop); err != nil {
		return nil, err
	}
	return p, nil
}

// synConfigs are the receivers compared, each with the count of the SYNs
// it handled.
func synConfigs(p *vethPair) []*synConfig {
	return []*synConfig{
		{id: "xdp-drop", label: "bare XDP_DROP (SYNs dropped)", setup: func() (func() error, error) { return p.attachSink(pktgen.SinkDrop) },
			handled: p.xdpRx},
		synLimiterConfig(p, "xdplimit-drop", "xdplimit, action drop (SYNs dropped)", "drop", maps.VerdictDrop),
		synLimiterConfig(p, "xdplimit-cookie", "xdplimit, action syncookie (SYNs answered)", "syncookie", maps.VerdictCookie),
		{id: "kernel", label: "the kernel's own cookies, no filter in XDP (SYNs answered)",
			setup: func() (func() error, error) { return p.attachSink(pktgen.SinkPass) },
			handled: func() (uint64, error) {
				c, err := p.v.PeerNS.Counters()
				return c.Raw["TcpExt.SyncookiesSent"], err
			}},
	}
}

// synLimiterConfig is xdplimit's SYN rule with action, the SYNs it handled
// counted by the rule's verdict v.
func synLimiterConfig(p *vethPair, id, label, action string, v maps.Verdict) *synConfig {
	c := &synConfig{id: id, label: label}
	var l *maps.Limiter
	c.setup = func() (func() error, error) {
		var detach func() error
		var err error
		l, detach, err = p.attachLimiter(maps.Options{Clock: maps.ClockCoarse}, synRule(
			fmt.Sprintf("{algorithm: token_bucket, rate: %d/s, burst: %d}", perSourceRate, perSourceBurst),
			fmt.Sprintf("{algorithm: token_bucket, rate: %d/s, burst: %d}", globalRate, globalBurst), action))
		if err != nil {
			return nil, err
		}
		return func() error { err := detach(); l = nil; return err }, nil
	}
	c.handled = func() (uint64, error) {
		if l == nil {
			return 0, errors.New("no limiter loaded")
		}
		st, err := l.RuleStats()
		if err != nil || len(st) == 0 {
			return 0, fmt.Errorf("rule stats: %v", err)
		}
		return st[0].Verdicts[v].Packets, nil
	}
	return c
}

// runAll floods each configuration once a repetition, the order rotated
// each repetition; one that failed twice is given up.
func (r *synResults) runAll(e *env, g *pktgen.Generator, p *vethPair) error {
	for rep := range r.Reps {
		for i := range r.Configs {
			c := r.Configs[(i+rep)%len(r.Configs)]
			if err := e.ctx.Err(); err != nil {
				return err
			}
			if len(c.errs) >= 2 {
				continue
			}
			if err := synRun(e, g, p, c, r.Count); err != nil {
				e.Logf("syncookie: %s: %v", c.id, err)
				c.errs = append(c.errs, errString(err))
			}
		}
	}
	return nil
}

// listenerSide readies the receiving namespace for the kernel's cookies: a
// listener on the SYNs' port, tcp_syncookies=2 (every SYN answered with a
// cookie) and a way back for the SYN-ACKs.
func listenerSide(v *netns.Veth) (net.Listener, error) {
	for k, val := range map[string]string{"net.ipv4.tcp_syncookies": "2", "net.ipv4.tcp_timestamps": "2"} {
		if err := v.PeerNS.SetSysctl(k, val); err != nil {
			return nil, err
		}
	}
	var ln net.Listener
	err := v.PeerNS.Do(func() error {
		if err := netlink.NeighAdd(&netlink.Neigh{LinkIndex: v.PeerIndex, Family: unix.AF_INET, State: netlink.NUD_PERMANENT,
			IP: v.Addr.AsSlice(), HardwareAddr: v.MAC}); err != nil {
			return fmt.Errorf("neighbour %s: %w", v.Addr, err)
		}
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: v.PeerIndex, Gw: v.Addr.AsSlice()}); err != nil {
			return fmt.Errorf("default route via %s: %w", v.Addr, err)
		}
		// Never accepted from: no client completes a handshake.
		var err error
		ln, err = net.Listen("tcp4", netip.AddrPortFrom(v.PeerAddr, synPort).String())
		return err
	})
	return ln, err
}

func synRun(e *env, g *pktgen.Generator, p *vethPair, c *synConfig, count uint64) error {
	teardown, err := c.setup()
	if err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	defer func() {
		if err := teardown(); err != nil {
			e.Logf("syncookie: %s teardown: %v", c.id, err)
		}
	}()
	n0, err := c.handled()
	if err != nil {
		return err
	}
	r, received, softirqd, err := p.timedFlood(e, g, count)
	if err != nil {
		return err
	}
	n1, err := c.handled()
	if err != nil {
		return err
	}
	n := float64(n1 - n0)
	cpu := r.CPUTime + softirqd
	if n == 0 || r.Elapsed <= 0 || cpu <= 0 {
		return fmt.Errorf("nothing handled (sent %d, received %d)", r.Sent, received)
	}
	c.rate = append(c.rate, n/r.Elapsed.Seconds())
	c.cpuRate = append(c.cpuRate, n/cpu.Seconds())
	c.lost = append(c.lost, max(0, 1-float64(received)/float64(r.Sent)))
	e.Logf("syncookie: %-15s %8.0f SYNs/s, %8.0f per CPU-s (sent %d in %v, CPU %v + ksoftirqd %v, received %d, handled %.0f)",
		c.id, n/r.Elapsed.Seconds(), n/cpu.Seconds(), r.Sent, r.Elapsed.Round(time.Millisecond), r.CPUTime.Round(time.Millisecond),
		softirqd.Round(time.Millisecond), received, n)
	return nil
}
