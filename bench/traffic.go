// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"time"

	"github.com/xdplimit/xdplimit/internal/harness/iperf3"
	"github.com/xdplimit/xdplimit/internal/netns"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

// What a host's own traffic pays when nothing is under attack: real
// clients (iperf3, dnsperf) in one namespace, real servers (iperf3,
// dnsmasq) in another behind a veth, through xdplimit with the policy a web
// server would use, beside the same with no XDP program and with a bare
// XDP_PASS, interleaved in one run.

// trafficPolicy is a web server's: an allow list for its monitoring, a
// deny list, SYN cookies on its ports with a per-source SYN limit, and
// per-source packet limits that its clients stay within.
const trafficPolicy = `
allow: [192.0.2.0/28]
deny: [203.0.113.0/24]
rules:
  - name: web-syn
    match: {protocol: tcp, dst_ports: [80, 443], tcp_flags: [syn]}
    key: {ipv4_prefix: 32, ipv6_prefix: 64}
    limit: {algorithm: token_bucket, rate: 50/s, burst: 100}
    aggregate:
      - key: global
        limit: {algorithm: token_bucket, rate: 20000/s, burst: 20000}
    action: syncookie
  - name: web
    match: {protocol: tcp, dst_ports: [80, 443]}
    limit: {algorithm: token_bucket, rate: 5000000/s, burst: 5000000}
  - name: dns
    match: {protocol: udp, dst_ports: [53]}
    limit: {algorithm: token_bucket, rate: 1000000/s, burst: 1000000}
`

// trafficPort is the iperf3 server's: a web port, so its segments meet
// the SYN cookie rule's ACK check.
const trafficPort = 443

// trafficMeasure is one kind of traffic, measured under each configuration.
type trafficMeasure struct {
	id, label, unit string
	run             func(e *env, p *vethPair, d time.Duration) (float64, error)
}

// trafficConfig is one receiver: what the server's end of the veth runs.
type trafficConfig struct {
	id, label string
	setup     func(p *vethPair) (func() error, error)
}

type trafficResults struct {
	Reps     int
	Duration time.Duration
	Measures []trafficMeasure
	Configs  []trafficConfig
	vals     map[[2]string]sample // by measure and configuration
	errs     map[[2]string][]string
}

func (r *trafficResults) ratio(measure, a, b string) float64 {
	x, y := r.vals[[2]string{measure, a}], r.vals[[2]string{measure, b}]
	if len(x) == 0 || len(y) == 0 || y.median() == 0 {
		return 0
	}
	return x.median() / y.median()
}

func trafficBench(e *env, quick bool) (*trafficResults, error) {
	res := &trafficResults{Reps: 5, Duration: 3 * time.Second,
		vals: map[[2]string]sample{}, errs: map[[2]string][]string{}}
	if quick {
		res.Reps, res.Duration = 2, time.Second
	}
	v, err := e.vethPair("xbr0", "xbr1", 23)
	if err != nil {
		return nil, err
	}
	p := &vethPair{v: v}
	stop, err := startTrafficServers(v)
	if err != nil {
		return nil, err
	}
	defer stop()
	// dnsperf's queries, written once for every run.
	qf := filepath.Join(os.TempDir(), fmt.Sprintf("xdplimit-bench-queries-%d", os.Getpid()))
	if err := os.WriteFile(qf, []byte("example.test A\n"), 0o644); err != nil {
		return nil, err
	}
	defer os.Remove(qf)
	res.Measures = []trafficMeasure{
		{"iperf3-1", "TCP transfer, one stream (iperf3)", "Mbit/s", iperfRun(1)},
		{"iperf3-8", "TCP transfer, eight streams (iperf3)", "Mbit/s", iperfRun(8)},
		{"dns", "UDP request/response: DNS lookups (dnsperf against dnsmasq)", "lookups/s", dnsperfRun(qf)},
	}
	res.Configs = []trafficConfig{
		{"none", "no XDP program", func(*vethPair) (func() error, error) { return func() error { return nil }, nil }},
		{"pass", "bare XDP_PASS", func(p *vethPair) (func() error, error) { return p.attachSink(pktgen.SinkPass) }},
		{"xdplimit", "xdplimit, a web server's policy", func(p *vethPair) (func() error, error) {
			_, detach, err := p.attachLimiter(maps.Options{Clock: maps.ClockCoarse}, trafficPolicy)
			return detach, err
		}},
	}
	for rep := range res.Reps {
		for i := range res.Configs {
			c := res.Configs[(i+rep)%len(res.Configs)]
			if err := e.ctx.Err(); err != nil {
				return nil, err
			}
			detach, err := c.setup(p)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", c.label, err)
			}
			for _, m := range res.Measures {
				k := [2]string{m.id, c.id}
				if v, err := m.run(e, p, res.Duration); err != nil {
					res.errs[k] = append(res.errs[k], errString(err))
				} else {
					res.vals[k] = append(res.vals[k], v)
				}
			}
			if err := detach(); err != nil {
				return nil, fmt.Errorf("%s: detach: %w", c.label, err)
			}
		}
	}
	return res, nil
}

// startTrafficServers runs iperf3 and dnsmasq in v's receiving namespace
// until stop, each in a process group of its own (dnsmasq forks).
func startTrafficServers(v *netns.Veth) (stop func(), err error) {
	addr := v.PeerAddr.String()
	var procs []*exec.Cmd
	stop = func() {
		for _, c := range procs {
			_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			_ = c.Wait()
		}
	}
	for _, args := range [][]string{
		{"iperf3", "-s", "-p", strconv.Itoa(trafficPort), "-B", addr},
		{"dnsmasq", "--no-daemon", "--no-resolv", "--no-hosts", "--bind-interfaces", "--listen-address=" + addr,
			"--port=53", "--address=/example.test/192.0.2.1", "--user=root", "--pid-file=", "--cache-size=1000"},
	} {
		bin, err := exec.LookPath(args[0])
		if err != nil {
			stop()
			return nil, fmt.Errorf("%s not found (run make deps): %w", args[0], err)
		}
		c := exec.Command(bin, args[1:]...)
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := v.PeerNS.Do(c.Start); err != nil {
			stop()
			return nil, fmt.Errorf("%s: %w", args[0], err)
		}
		procs = append(procs, c)
	}
	// Both listen within a moment; a client refused is tried again.
	return stop, nil
}

// inClient runs a client command in p's sending namespace, bounded by d
// and a margin, and returns its standard output.
func inClient(e *env, p *vethPair, d time.Duration, name string, args ...string) ([]byte, error) {
	bin, err := exec.LookPath(name)
	if err != nil {
		return nil, fmt.Errorf("%s not found (run make deps): %w", name, err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, d+30*time.Second)
	defer cancel()
	var out []byte
	err = p.v.NS.Do(func() error {
		var rerr error
		out, rerr = exec.CommandContext(ctx, bin, args...).Output()
		return rerr
	})
	return out, err
}

// iperfRun is an iperf3 transfer of streams streams, in Mbit/s received.
func iperfRun(streams int) func(e *env, p *vethPair, d time.Duration) (float64, error) {
	return func(e *env, p *vethPair, d time.Duration) (float64, error) {
		for try := 0; ; try++ {
			out, err := inClient(e, p, d, "iperf3", "-c", p.v.PeerAddr.String(), "-p", strconv.Itoa(trafficPort),
				"-P", strconv.Itoa(streams), "-t", strconv.Itoa(max(int(d/time.Second), 1)), "-J", "--connect-timeout", "2000")
			bps, reported, perr := iperf3.Parse(out)
			switch {
			case perr != nil:
				return 0, fmt.Errorf("iperf3: %v; %w", err, perr)
			case reported == "":
				return bps / 1e6, nil
			case try == 20:
				return 0, errors.New("iperf3: " + reported)
			}
			// The server may still be starting, or busy with the last run.
			time.Sleep(200 * time.Millisecond)
		}
	}
}

var dnsperfQPS = regexp.MustCompile(`Queries per second:\s+([0-9.]+)`)

// dnsperfRun is dnsperf's rate of completed lookups for d, of the queries
// in the file qf.
func dnsperfRun(qf string) func(e *env, p *vethPair, d time.Duration) (float64, error) {
	return func(e *env, p *vethPair, d time.Duration) (float64, error) {
		out, err := inClient(e, p, d, "dnsperf", "-s", p.v.PeerAddr.String(), "-d", qf, "-c", "4", "-q", "100",
			"-l", strconv.Itoa(max(int(d/time.Second), 1)), "-t", "1")
		if err != nil {
			return 0, fmt.Errorf("dnsperf: %v: %s", err, out)
		}
		m := dnsperfQPS.FindSubmatch(out)
		if m == nil {
			return 0, fmt.Errorf("dnsperf printed no rate: %s", out)
		}
		return strconv.ParseFloat(string(m[1]), 64)
	}
}
