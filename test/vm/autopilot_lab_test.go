// SPDX-License-Identifier: Apache-2.0

package vm

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
)

// The autopilot's live lab on a lab (newLab): real clients in its sending
// namespace (NS) and real servers in its receiving one (PeerNS), counted by
// the clients themselves, and floods of distinct precomputed frames written
// with AF_PACKET out of the sending end, so that they meet the receiving
// end (PeerName), where xdplimit attaches, beside the real traffic. The
// servers: dnsmasq on port 53, a Go HTTP server on port 80, iperf3 on 5201.

const (
	labHTTPPort  = 80
	labIperfPort = 5201
	// Shape a's port is the resolver's: only its payload prefix then
	// sets it apart from the real lookups to the same destination.
	prefixFloodPort = 53
	attackPrefix    = "\xde\xad\xbe\xef\x13\x37\x00\x01"
	attackName      = "xq7zk.attack.test"
)

// labNames are the names the resolver answers, and the lookups ask.
var labNames = []string{"www.lab.test", "a.lab.test", "b.lab.test", "mail.lab.test"}

// attackNet holds the floods' sources: routed nowhere in the lab, so the
// servers' answers to them go nowhere; XDP sees the frames regardless.
var attackNet = netip.MustParsePrefix("10.200.0.0/16")

// trafficConfig sets the real clients' pace; zero fields take the defaults.
type trafficConfig struct {
	DNSRate, HTTPRate       int           // per second: 200, 50
	DNSTimeout, HTTPTimeout time.Duration // 1 s; 2 s (one SYN retransmission fits)
	// IperfRate caps the transfer (iperf3 -b, default 100M): a steady
	// load, not one that takes the CPUs the floods and servers share.
	IperfRate string
	// IperfRun is one iperf3 run, in whole seconds (iperf3 -t; default
	// 1 s): the transfer is runs back to back, each counted when it ends,
	// because an interrupted run reports no bytes received.
	IperfRun time.Duration
}

func (c trafficConfig) withDefaults() trafficConfig {
	c.DNSRate, c.HTTPRate = cmp.Or(c.DNSRate, 200), cmp.Or(c.HTTPRate, 50)
	c.DNSTimeout, c.HTTPTimeout = cmp.Or(c.DNSTimeout, time.Second), cmp.Or(c.HTTPTimeout, 2*time.Second)
	c.IperfRate, c.IperfRun = cmp.Or(c.IperfRate, "100M"), max(c.IperfRun.Truncate(time.Second), time.Second)
	return c
}

// dnsCounts: lookups sent, answered with an address in time, answered
// otherwise (an error, no address), lost (no answer in the timeout; Late
// of them answered afterwards).
type dnsCounts struct{ Sent, Answered, Bad, Lost, Late uint64 }

// lossShare is the share of settled lookups not answered well in time.
func (d dnsCounts) lossShare() float64 {
	return float64(d.Bad+d.Lost) / float64(max(d.Answered+d.Bad+d.Lost, 1))
}

type httpCounts struct{ Sent, OK, Failed uint64 }

func (h httpCounts) lossShare() float64 { return float64(h.Failed) / float64(max(h.OK+h.Failed, 1)) }

// iperfCounts: iperf3 runs ended, those that ended in an error (Err, the
// last one's), and the bytes and seconds the server received in the rest.
type iperfCounts struct {
	Runs, Failed, Bytes uint64
	Seconds             float64
	Err                 string
}

func (i iperfCounts) bitsPerSecond() float64 { return 8 * float64(i.Bytes) / max(i.Seconds, 1e-9) }

// completed: runs ended and none in an error.
func (i iperfCounts) completed() bool { return i.Runs > 0 && i.Failed == 0 }

// trafficCounts is what the real clients counted since they started.
type trafficCounts struct {
	Elapsed time.Duration
	DNS     dnsCounts
	HTTP    httpCounts
	Iperf   iperfCounts
}

// sub is what was counted between b, an earlier snapshot, and c.
func (c trafficCounts) sub(b trafficCounts) trafficCounts {
	d, h, i := c.DNS, c.HTTP, c.Iperf
	r := trafficCounts{Elapsed: c.Elapsed - b.Elapsed,
		DNS:   dnsCounts{d.Sent - b.DNS.Sent, d.Answered - b.DNS.Answered, d.Bad - b.DNS.Bad, d.Lost - b.DNS.Lost, d.Late - b.DNS.Late},
		HTTP:  httpCounts{h.Sent - b.HTTP.Sent, h.OK - b.HTTP.OK, h.Failed - b.HTTP.Failed},
		Iperf: iperfCounts{Runs: i.Runs - b.Iperf.Runs, Failed: i.Failed - b.Iperf.Failed, Bytes: i.Bytes - b.Iperf.Bytes, Seconds: i.Seconds - b.Iperf.Seconds}}
	if r.Iperf.Failed > 0 {
		r.Iperf.Err = i.Err
	}
	return r
}

func (c trafficCounts) String() string {
	return fmt.Sprintf("in %v: DNS %d sent, %d answered, %d bad, %d lost (%d late; loss %.3f%%); HTTP %d sent, %d OK, %d failed (%.3f%%); "+
		"iperf3 %d runs, %d failed, %.1f Mbit/s%s", c.Elapsed.Round(time.Millisecond), c.DNS.Sent, c.DNS.Answered, c.DNS.Bad, c.DNS.Lost,
		c.DNS.Late, 100*c.DNS.lossShare(), c.HTTP.Sent, c.HTTP.OK, c.HTTP.Failed, 100*c.HTTP.lossShare(), c.Iperf.Runs, c.Iperf.Failed,
		c.Iperf.bitsPerSecond()/1e6, map[bool]string{true: " (" + c.Iperf.Err + ")"}[c.Iperf.Err != ""])
}

// realTraffic is the three clients running until Stop.
type realTraffic struct {
	cfg    trafficConfig
	start  time.Time
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	c      trafficCounts
	stop   sync.Once
}

// startRealTraffic starts the servers in l's receiving namespace and the
// clients in its sending one, and returns once the resolver answers (the
// first lookups would otherwise be lost to a dnsmasq not yet listening).
// The test's cleanup stops the clients, then the servers, also on failure.
func startRealTraffic(t *testing.T, l *lab, cfg trafficConfig) *realTraffic {
	t.Helper()
	iperf, err := exec.LookPath("iperf3")
	testutil.Require(t, err == nil, "iperf3 not found (Debian package iperf3; run make deps)")
	dnsmasq, err := exec.LookPath("dnsmasq")
	testutil.Require(t, err == nil, "dnsmasq not found (Debian package dnsmasq-base; run make deps)")
	srv := l.PeerAddr.String()
	// The servers' answers to the floods' sources go back out to the
	// client's end, which drops them: without a route they fail to send,
	// and dnsmasq logs each.
	err = l.PeerNS.Do(func() error {
		link, err := netlink.LinkByName(l.PeerName)
		if err != nil {
			return err
		}
		return netlink.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Gw: l.Addr.AsSlice(),
			Dst: &net.IPNet{IP: attackNet.Addr().AsSlice(), Mask: net.CIDRMask(attackNet.Bits(), 32)}})
	})
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--no-daemon", "--no-resolv", "--no-hosts", "--bind-interfaces", "--listen-address=" + srv, "--port=53",
		"--user=root", "--pid-file=", "--cache-size=1000"}
	for i, n := range labNames {
		args = append(args, fmt.Sprintf("--host-record=%s,192.0.2.%d", n, 10+i))
	}
	startDaemon(t, l.PeerNS, "dnsmasq", exec.Command(dnsmasq, args...))
	startDaemon(t, l.PeerNS, "iperf3 server", exec.Command(iperf, "-s", "-p", strconv.Itoa(labIperfPort), "-B", srv))
	startHTTPServer(t, l)
	dnsAt := netip.AddrPortFrom(l.PeerAddr, 53)
	waitFor(t, "the resolver to answer", 10*time.Second, func() bool { return l.probeDNS(dnsAt) })

	rt := &realTraffic{cfg: cfg.withDefaults(), start: time.Now()}
	ctx, cancel := context.WithCancel(context.Background())
	rt.cancel = cancel
	socks, err := openDNSSockets(l)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	rt.wg.Go(func() { rt.runDNS(ctx, socks, dnsAt) })
	rt.wg.Go(func() { rt.runHTTP(ctx, l, fmt.Sprintf("http://%s:%d/", srv, labHTTPPort)) })
	rt.wg.Go(func() { rt.runIperf(ctx, l, iperf) })
	t.Cleanup(func() { rt.Stop() })
	return rt
}

// Snapshot is what the clients counted so far.
func (rt *realTraffic) Snapshot() trafficCounts {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	c := rt.c
	c.Elapsed = time.Since(rt.start)
	return c
}

// Stop stops sending, waits until every lookup and request sent is
// answered or timed out and the iperf3 run ends, and returns the totals.
func (rt *realTraffic) Stop() trafficCounts {
	rt.stop.Do(func() { rt.cancel(); rt.wg.Wait() })
	return rt.Snapshot()
}

func (rt *realTraffic) count(f func(c *trafficCounts)) {
	rt.mu.Lock()
	f(&rt.c)
	rt.mu.Unlock()
}

// startHTTPServer serves "ok" on port 80 of l's receiving end until the
// test ends. The listening socket, made in the namespace, stays there.
func startHTTPServer(t *testing.T, l *lab) {
	t.Helper()
	var ln net.Listener
	err := l.PeerNS.Do(func() (err error) {
		ln, err = net.Listen("tcp4", netip.AddrPortFrom(l.PeerAddr, labHTTPPort).String())
		return err
	})
	if err != nil {
		t.Fatalf("HTTP server: %v", err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})}
	done := make(chan struct{})
	go func() { _ = srv.Serve(ln); close(done) }()
	t.Cleanup(func() { srv.Close(); <-done })
}

// runHTTP sends a GET at the configured rate until ctx ends, then waits
// for those in flight. Each is a connection of its own, as from many
// clients: the normal traffic to port 80 then holds real SYNs (Linux's
// options and window), which a SYN flood's fingerprint is judged against.
func (rt *realTraffic) runHTTP(ctx context.Context, l *lab, url string) {
	client := &http.Client{Timeout: rt.cfg.HTTPTimeout, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: l.NS.DialContext}}
	defer client.CloseIdleConnections()
	tick := time.NewTicker(time.Second / time.Duration(rt.cfg.HTTPRate))
	defer tick.Stop()
	var inflight sync.WaitGroup
	defer inflight.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		rt.count(func(tc *trafficCounts) { tc.HTTP.Sent++ })
		inflight.Go(func() {
			ok := false
			// Not ctx: Stop lets a request in flight finish.
			if resp, err := client.Get(url); err == nil {
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				ok = err == nil && resp.StatusCode == http.StatusOK && string(body) == "ok\n"
			}
			rt.count(func(tc *trafficCounts) {
				if ok {
					tc.HTTP.OK++
				} else {
					tc.HTTP.Failed++
				}
			})
		})
	}
}

// runIperf runs iperf3 transfers back to back until ctx ends; the one
// running then finishes. Each run is killed 10 s after its end was due.
// A run its server refuses or turns away as busy (it is between tests)
// is tried again, for up to 5 s.
func (rt *realTraffic) runIperf(ctx context.Context, l *lab, bin string) {
	secs := strconv.Itoa(int(rt.cfg.IperfRun / time.Second))
	for refused := 0; ctx.Err() == nil; {
		var out []byte
		_ = l.NS.Do(func() error {
			run, cancel := context.WithTimeout(context.Background(), rt.cfg.IperfRun+10*time.Second)
			defer cancel()
			out, _ = exec.CommandContext(run, bin, "-c", l.PeerAddr.String(), "-p", strconv.Itoa(labIperfPort), "-t", secs,
				"-b", rt.cfg.IperfRate, "-J", "--connect-timeout", "1000").Output()
			return nil
		})
		var rep struct {
			End struct {
				SumReceived struct {
					Bytes   uint64  `json:"bytes"`
					Seconds float64 `json:"seconds"`
				} `json:"sum_received"`
			} `json:"end"`
			Error string `json:"error"`
		}
		if err := json.Unmarshal(out, &rep); err != nil {
			rep.Error = fmt.Sprintf("no report (%v): %.200s", err, out)
		}
		// iperf3 -s listens anew after each test: a run that starts in
		// that moment is refused (before the server's first listen too),
		// or, when the server has not yet put the last test away (slow
		// under a flood's load), told that it is busy. Neither is a drop
		// (a drop is a timeout): retried, and failed only after 5 s.
		if (strings.Contains(rep.Error, "Connection refused") || strings.Contains(rep.Error, "server is busy")) && refused < 50 {
			refused++
			time.Sleep(100 * time.Millisecond)
			continue
		}
		refused = 0
		rt.count(func(tc *trafficCounts) {
			tc.Iperf.Runs++
			if rep.Error != "" || rep.End.SumReceived.Bytes == 0 {
				tc.Iperf.Failed++
				tc.Iperf.Err = cmp.Or(rep.Error, "nothing received")
				return
			}
			tc.Iperf.Bytes += rep.End.SumReceived.Bytes
			tc.Iperf.Seconds += rep.End.SumReceived.Seconds
		})
	}
}
