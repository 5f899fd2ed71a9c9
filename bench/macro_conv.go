// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

// The conversation checks on a veth: each flood that one check exists to
// drop, dropped by that check (`when: always`), beside the parser alone
// and bare XDP_DROP on the same flood. Measured in the veth section's
// repetitions, after each repetition's other floods, so that the same
// load on the machine spreads over both.

// convFlood is one flood and the check that drops it.
type convFlood struct {
	id, label string
	pair      *vethPair // the conversation pair, with this flood's frame
	sources   pktgen.Sources
	policy    string
	counter   maps.Counter // the check's drop counter
	configs   []*convConfig
}

// convConfig is one receiver of a flood.
type convConfig struct {
	id, label string
	check     bool // the check's program, whose drops are counted
	opts      maps.Options
	rate      sample // frames the receiver's XDP program saw per second of the send
	cpuRate   sample // the same per CPU-second (as the veth section counts it)
	dropped   sample // the check's drops over those frames
	errs      []string
}

type convVeth struct {
	Floods []*convFlood
}

// Names of the receivers of each flood; the ratios divide by convBare.
const (
	convBare   = "xdp-drop"
	convParser = "parser"
	convCheck  = "check"
)

// convTCPListen is the receiver's listener the forged ACKs aim at: an
// open port, whose ACKs the check must look up and then refuse (no
// cookie), the costliest miss.
const convTCPListen = 8080

// newConvVeth is the conversation floods on a veth pair of their own: a
// listener on the receiver, and the floods' frames addressed to it.
func newConvVeth(e *env) (*convVeth, func(), error) {
	p, err := newMacroPair(e, "v", 21)
	if err != nil {
		return nil, nil, err
	}
	v := p.v
	var ln net.Listener
	if err := v.PeerNS.Do(func() error {
		ln, err = net.Listen("tcp4", netip.AddrPortFrom(v.PeerAddr, convTCPListen).String())
		return err
	}); err != nil {
		return nil, nil, err
	}
	frame := func(b []byte) *vethPair { return &vethPair{v: v, frame: pktgen.SetMACs(b, v.MAC, v.PeerMAC)} }
	spoofed := macroScenarios[2].sources // 16M random sources
	floods := []*convFlood{
		{id: "tcp", label: "forged ACKs to an open local port, from 16M random sources; `tcp` drops them",
			pair: frame(convACK(v.Addr, v.PeerAddr, 40000, convTCPListen)), sources: spoofed,
			policy: "conversations: {tcp: always}\nrules: []\n", counter: maps.CounterNoConnection},
		{id: "udp", label: "UDP to random closed local ports (of 65536), from one source; `udp` drops them",
			pair:    frame(pktgen.UDP4(v.Addr, v.PeerAddr, 40000, 1, 18)),
			sources: pktgen.Sources{Mode: pktgen.Random, Mask: 0xffff, DstPorts: true},
			policy:  "conversations: {udp: always}\nrules: []\n", counter: maps.CounterNoSocket},
		{id: "reflection", label: "forged DNS answers from port 53 to a local port, from 16M random sources; `reflection` drops them",
			pair: frame(dnsAnswer(v.Addr, v.PeerAddr, 40000)), sources: spoofed,
			policy: "conversations: {reflection: always}\nrules: []\n", counter: maps.CounterNoRequest},
	}
	for _, f := range floods {
		f.configs = []*convConfig{
			{id: convBare, label: "bare XDP_DROP"},
			{id: convParser, label: "the parser alone, then XDP_DROP", opts: maps.Options{Clock: maps.ClockCoarse, BenchParseOnly: true}},
			{id: convCheck, label: "the check", check: true, opts: maps.Options{Clock: maps.ClockCoarse}},
		}
	}
	return &convVeth{Floods: floods}, func() { ln.Close(); p.close() }, nil
}

// runRep floods each receiver of each flood once, the receivers' order
// rotated by rep; a receiver that failed twice is given up.
func (cv *convVeth) runRep(e *env, g *pktgen.Generator, count uint64, rep int) error {
	for _, f := range cv.Floods {
		for i := range f.configs {
			c := f.configs[(i+rep)%len(f.configs)]
			if err := e.ctx.Err(); err != nil {
				return err
			}
			if len(c.errs) >= 2 {
				continue
			}
			if err := f.run(e, g, c, count); err != nil {
				e.Logf("macro: conversation %s / %s: %v", f.id, c.id, err)
				c.errs = append(c.errs, errString(err))
			}
		}
	}
	return nil
}

// setup attaches c's program to the flood's receiver; the check's limiter
// is returned for its counter, its local table set to the receiver's
// addresses.
func (f *convFlood) setup(c *convConfig) (*maps.Limiter, func() error, error) {
	p := f.pair
	if c.id == convBare {
		detach, err := p.attachSink(pktgen.SinkDrop)
		return nil, detach, err
	}
	l, detach, err := p.attachLimiter(c.opts, f.policy)
	if err != nil {
		return nil, nil, err
	}
	local := []netip.Prefix{netip.PrefixFrom(p.v.PeerAddr, 32), netip.PrefixFrom(p.v.PeerAddr6, 128)}
	if err := l.SetLocal(local); err != nil {
		return nil, nil, errors.Join(fmt.Errorf("local table: %w", err), detach())
	}
	return l, detach, nil
}

func (f *convFlood) run(e *env, g *pktgen.Generator, c *convConfig, count uint64) error {
	l, detach, err := f.setup(c)
	if err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	defer func() {
		if err := detach(); err != nil {
			e.Logf("macro: conversation %s / %s teardown: %v", f.id, c.id, err)
		}
	}()
	if err := g.SetSources(f.sources); err != nil {
		return err
	}
	r, received, softirqd, err := f.pair.timedFlood(e, g, count)
	if err != nil {
		return err
	}
	cpu := r.CPUTime + softirqd
	if received == 0 || r.Elapsed <= 0 || cpu <= 0 {
		return fmt.Errorf("the receiver saw no frames (sent %d)", r.Sent)
	}
	rx := float64(received)
	c.rate = append(c.rate, rx/r.Elapsed.Seconds())
	c.cpuRate = append(c.cpuRate, rx/cpu.Seconds())
	extra := ""
	if c.check {
		cs, err := l.Counters()
		if err != nil {
			return err
		}
		c.dropped = append(c.dropped, float64(cs[f.counter].Packets)/rx)
		extra = fmt.Sprintf(", the check dropped %d", cs[f.counter].Packets)
	}
	e.Logf("macro: conversation %-10s %-8s %6.3f Mpps, %6.3f per CPU-s (sent %d in %v, CPU %v + ksoftirqd %v, received %d%s)",
		f.id, c.id, rx/r.Elapsed.Seconds()/1e6, rx/cpu.Seconds()/1e6, r.Sent, r.Elapsed.Round(time.Millisecond),
		r.CPUTime.Round(time.Millisecond), softirqd.Round(time.Millisecond), received, extra)
	return nil
}

func (f *convFlood) config(id string) *convConfig {
	for _, c := range f.configs {
		if c.id == id {
			return c
		}
	}
	return nil
}

// cpuRatio is receiver a's median frames per CPU-second over b's on the
// flood (0 when either is missing).
func (f *convFlood) cpuRatio(a, b string) float64 {
	x, y := f.config(a), f.config(b)
	if x == nil || y == nil || len(x.cpuRate) == 0 || y.cpuRate.median() == 0 {
		return 0
	}
	return x.cpuRate.median() / y.cpuRate.median()
}
