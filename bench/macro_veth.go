// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
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

// attachLimiter loads xdplimit with opts and policy and attaches it to
// the receiving end of p; detach takes it off and closes it.
func (p *vethPair) attachLimiter(opts maps.Options, policy string) (l *maps.Limiter, detach func() error, err error) {
	l, err = loadLimiter(opts, policy, nil)
	if err != nil {
		return nil, nil, err
	}
	lk, err := p.attachProg(l.Program())
	if err != nil {
		l.Close()
		return nil, nil, err
	}
	return l, func() error { return errors.Join(lk.Close(), l.Close()) }, nil
}

// attachSink puts the sink program in mode on the receiving end of p;
// detach takes it off.
func (p *vethPair) attachSink(mode pktgen.SinkMode) (detach func() error, err error) {
	s, err := pktgen.AttachSink(p.v.PeerNS.Path(), p.v.PeerName, mode)
	if err != nil {
		return nil, err
	}
	return s.Close, nil
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
