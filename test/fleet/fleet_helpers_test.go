package fleet

// The fleet of a test: one real `xdplimit attach` per lab host, on the
// host's Eth0, with a policy whose fleet: section points at the lab's
// Redis; and the readings the end-to-end tests make of it (rule counters
// from the pins, `xdplimit status`, /metrics, the veth's XDP counters).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/internal/testkit/fleetlab"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/loader"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/metrics"
)

// fleetYAML is a policy's fleet: section for the given Redis URLs (several
// URLs: the seeds of a cluster), under a namespace unique to the call, so
// fleets of several tests sharing one Redis never see each other's keys.
func fleetYAML(sync string, cluster bool, urls ...string) string {
	id := make([]byte, 4)
	_, _ = rand.Read(id)
	var b strings.Builder
	fmt.Fprintf(&b, "fleet:\n  redis: [%s]\n  namespace: e2e-%s\n  sync: %s\n",
		strings.Join(urls, ", "), hex.EncodeToString(id), sync)
	if cluster {
		b.WriteString("  cluster: true\n")
	}
	return b.String()
}

// redisURL is the URL of the lab's single server.
func redisURL(l *fleetlab.Lab) string { return "redis://" + l.RedisAddr() + "/0" }

// clusterURLs are the seed URLs of a cluster.
func clusterURLs(c *testutil.RedisCluster) []string {
	var urls []string
	for _, a := range c.Addrs() {
		urls = append(urls, "redis://"+a)
	}
	return urls
}

// fleetOptions tune startFleet.
type fleetOptions struct {
	// Hosts are the lab hosts that run attach (default: all).
	Hosts []int
	// WaitUp waits until every process has logged its first successful
	// exchange with Redis ("Redis answers"); else only until it attached.
	WaitUp bool
	// Args are extra attach flags; Env extra environment (REDIS_PASSWORD=).
	Args []string
	Env  []string
}

// fleetRun is the attach processes of one test, by host index.
type fleetRun struct {
	lab    *fleetlab.Lab
	policy string // the policy file's path
	opts   fleetOptions
	procs  []*attachProc
}

// startFleet writes policy to a file and starts `xdplimit attach` with it
// on every chosen host at once, and waits until each is attached (and, with
// WaitUp, has reached Redis). Every process is stopped in t.Cleanup, which
// runs before the lab's (registered earlier), even when the test fails.
func startFleet(t *testing.T, l *fleetlab.Lab, policy string, o fleetOptions) *fleetRun {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	if o.Hosts == nil {
		for i := range l.Hosts() {
			o.Hosts = append(o.Hosts, i)
		}
	}
	f := &fleetRun{lab: l, policy: path, opts: o, procs: make([]*attachProc, l.Hosts())}
	for _, i := range o.Hosts {
		f.procs[i] = f.start(t, i)
	}
	for _, i := range o.Hosts {
		f.procs[i].waitReady(t, o.WaitUp)
	}
	return f
}

// proc is host i's attach process (nil if that host runs none).
func (f *fleetRun) proc(i int) *attachProc { return f.procs[i] }

// attachProc is one `xdplimit attach` in a host's namespace.
type attachProc struct {
	host *fleetlab.Host
	args []string
	cmd  *exec.Cmd
	out  *testutil.SyncBuffer
	done chan struct{} // closed once the process is reaped
	err  error         // its exit status, set before done closes
}

// start forks attach from a thread inside host i's namespace: the child is
// born there and keeps the machine's mounts (unlike `ip netns exec`), so its
// pins are where loader.Open looks. The thread stays locked in Netns.Do
// until the child is reaped, so Pdeathsig kills the child only if the test
// binary dies, not when some thread exits.
func (f *fleetRun) start(t *testing.T, i int) *attachProc {
	t.Helper()
	h := f.lab.Host(i)
	// A small state table: three processes with the default million
	// entries would pin ~300 MB for one source.
	// --detach-on-exit: the cleanup's SIGTERM removes what it attached.
	args := append([]string{"attach", h.Eth0, "--policy", f.policy, "--max-sources", "65536", "--detach-on-exit"}, f.opts.Args...)
	p := &attachProc{host: h, args: args, out: &testutil.SyncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(testutil.XdplimitBin(t), args...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.Env = append(os.Environ(), f.opts.Env...)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: unix.SIGKILL}
	started := make(chan error, 1)
	go func() {
		defer close(p.done)
		err := h.NS.Do(func() error {
			if err := p.cmd.Start(); err != nil {
				return err
			}
			started <- nil
			p.err = p.cmd.Wait()
			return nil
		})
		if err != nil {
			started <- err
		}
	}()
	if err := <-started; err != nil {
		t.Fatalf("host %d: start xdplimit %v: %v", i, args, err)
	}
	t.Cleanup(func() {
		if !p.exited() {
			// SIGTERM detaches and removes the pins (--detach-on-exit);
			// SIGKILL if it hangs.
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
				t.Errorf("host %d: xdplimit ignored SIGTERM for 10 s; killed", i)
				_ = p.cmd.Process.Kill()
				<-p.done
			}
		}
		if t.Failed() {
			t.Logf("host %d: xdplimit %v output:\n%s", i, args, p.output())
		}
		// Whatever happened, leave no pins and no run-time files: the
		// lock and fleet status are removed only by a clean exit.
		_ = os.RemoveAll(loader.PinRoot + "/" + h.Eth0)
		for _, suffix := range []string{".lock", ".fleet.json", ".fleet.json.tmp"} {
			_ = os.Remove(filepath.Join(loader.RunDir(), h.Eth0+suffix))
		}
	})
	return p
}

func (p *attachProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *attachProc) output() string { return p.out.String() }

// waitReady waits until the process has attached and started its fleet
// sync, and with up until it has reached Redis.
func (p *attachProc) waitReady(t *testing.T, up bool) {
	t.Helper()
	p.waitFor(t, "msg=attached ", 30*time.Second)
	p.waitFor(t, "fleet sync started", 10*time.Second)
	if up {
		p.waitFor(t, "Redis answers", 10*time.Second)
	}
}

// waitFor waits until the process has logged s, failing if it exits first.
func (p *attachProc) waitFor(t *testing.T, s string, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for !strings.Contains(p.output(), s) {
		select {
		case <-p.done:
			t.Fatalf("host %d: xdplimit exited (%v) before %q:\n%s", p.host.Index, p.err, s, p.output())
		case <-deadline:
			t.Fatalf("host %d: no %q from xdplimit after %v:\n%s", p.host.Index, s, timeout, p.output())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// ruleCounts reads one rule's pass and drop packets on host h from the
// attach's pins (state shared by every namespace: bpffs is the machine's).
func ruleCounts(t *testing.T, h *fleetlab.Host, rule string) (pass, drop uint64) {
	t.Helper()
	pass, drop, err := readRule(h, rule)
	if err != nil {
		t.Fatal(err)
	}
	return pass, drop
}

// readRule is ruleCounts for goroutines other than the test's.
func readRule(h *fleetlab.Host, rule string) (pass, drop uint64, err error) {
	s, err := loader.Open(h.Eth0)
	if err != nil {
		return 0, 0, fmt.Errorf("host %d: %w", h.Index, err)
	}
	defer s.Close()
	stats, err := s.Limiter.RuleStats()
	if err != nil {
		return 0, 0, fmt.Errorf("host %d: rule counters: %w", h.Index, err)
	}
	for _, r := range stats {
		if r.Name == rule {
			return r.Verdicts[maps.VerdictPass].Packets, r.Verdicts[maps.VerdictDrop].Packets, nil
		}
	}
	return 0, 0, fmt.Errorf("host %d: no rule %q in force", h.Index, rule)
}

// runIn runs the command to completion (1 minute at most) in host h's
// namespace and returns its combined output.
func runIn(t *testing.T, h *fleetlab.Host, name string, args ...string) (string, error) {
	t.Helper()
	var out []byte
	var err error
	derr := h.NS.Do(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, err = exec.CommandContext(ctx, name, args...).CombinedOutput()
		return nil
	})
	if derr != nil {
		t.Fatal(derr)
	}
	return string(out), err
}

// statusFleetLine is the "fleet:" line of `xdplimit status` on host h.
func statusFleetLine(t *testing.T, h *fleetlab.Host) string {
	t.Helper()
	out, err := runIn(t, h, testutil.XdplimitBin(t), "status", h.Eth0)
	if err != nil {
		t.Fatalf("host %d: status: %v\n%s", h.Index, err, out)
	}
	for _, line := range strings.Split(out, "\n") {
		if s := strings.TrimSpace(line); strings.HasPrefix(s, "fleet:") {
			return s
		}
	}
	t.Fatalf("host %d: no fleet line in status:\n%s", h.Index, out)
	return ""
}

// metric sums every series of one metric on host h's /metrics (the attach
// serves it on loopback at the default address; each namespace has its
// own loopback). ok is false when the metric is absent.
func metric(t *testing.T, h *fleetlab.Host, name string) (sum float64, ok bool) {
	t.Helper()
	for series, v := range scrape(t, h) {
		if n, _, _ := strings.Cut(series, "{"); n == name {
			sum, ok = sum+v, true
		}
	}
	return sum, ok
}

// scrape reads host h's /metrics: every series (name and labels, as the
// exposition writes them) with its value.
func scrape(t *testing.T, h *fleetlab.Host) map[string]float64 {
	t.Helper()
	c := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{DialContext: testutil.DialIn(h.NS)},
	}
	defer c.CloseIdleConnections()
	return testutil.Scrape(t, c, "http://"+metrics.DefaultAddr+"/metrics")
}

// xdpPackets is what reached the XDP program on host h's Eth0, from the
// veth's own per-queue counters (ethtool -S rx_queue_N_xdp_packets): a
// veth whose ring is full drops frames before XDP sees them, so this, not
// what the generator sent, is what the limiter judged.
func xdpPackets(t *testing.T, h *fleetlab.Host) uint64 {
	t.Helper()
	out, err := runIn(t, h, "ethtool", "-S", h.Eth0)
	if err != nil {
		t.Fatalf("host %d: ethtool -S: %v\n%s", h.Index, err, out)
	}
	var n uint64
	found := false
	for _, line := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(k, "rx_queue_") || !strings.HasSuffix(k, "_xdp_packets") {
			continue
		}
		x, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil {
			t.Fatalf("host %d: ethtool line %q: %v", h.Index, line, err)
		}
		n += x
		found = true
	}
	if !found {
		t.Fatalf("host %d: no rx_queue_N_xdp_packets in ethtool -S:\n%s", h.Index, out)
	}
	return n
}

// spread is one source flooding several hosts evenly, as ECMP spreads a
// source with many ports: the same address everywhere, each host its own
// range of source ports (flows).
type spread struct {
	Hosts []int
	// Rate is the total frames per second, split evenly over Hosts; Dur
	// the time each flood lasts (its count is its rate x Dur).
	Rate float64
	Dur  time.Duration
	// Src is the source address (default 198.51.100.7); Sources > 1
	// walks consecutive addresses from it.
	Src     netip.Addr
	Sources uint32
	// DstPort defaults to 9, the port the tests' rules match.
	DstPort uint16
}

// spreadResult is what the generator sent.
type spreadResult struct {
	Sent    []uint64 // by host index
	Total   uint64
	Elapsed time.Duration     // the longest of the floods
	Gaps    [][]time.Duration // by host index: the flood's lapses (fleetlab.FloodResult)
}

// lostRefill bounds the refill a limiter that remembers at most memory of
// it (a token bucket's burst over its rate) can have lost to the floods'
// lapses: only while no host sent, so at most the least any flooded host
// lapsed beyond memory.
func (r spreadResult) lostRefill(hosts []int, memory time.Duration) time.Duration {
	lost := time.Duration(-1)
	for _, i := range hosts {
		var d time.Duration
		for _, g := range r.Gaps[i] {
			d += max(0, g-memory)
		}
		if lost < 0 || d < lost {
			lost = d
		}
	}
	return max(lost, 0)
}

// floodSpread runs the floods of s at once (fleetlab paces each, in 10 ms
// chunks, each chunk from the next of the host's 64 source ports) and
// returns when all are done. Each is bounded by its count and by a hard
// timeout of Dur + 15 s.
func floodSpread(t *testing.T, l *fleetlab.Lab, s spread) spreadResult {
	t.Helper()
	return spreadAsync(l, s)(t)
}

// spreadAsync starts the floods of s and returns at once, for faults
// injected while they run; wait collects them on the test's goroutine,
// where t.Fatal belongs.
func spreadAsync(l *fleetlab.Lab, s spread) (wait func(t *testing.T) spreadResult) {
	if !s.Src.IsValid() {
		s.Src = netip.MustParseAddr("198.51.100.7")
	}
	if s.DstPort == 0 {
		s.DstPort = 9
	}
	rate := s.Rate / float64(len(s.Hosts))
	res := spreadResult{Sent: make([]uint64, l.Hosts()), Gaps: make([][]time.Duration, l.Hosts())}
	errs := make([]error, len(s.Hosts))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for k, i := range s.Hosts {
		wg.Go(func() {
			first := uint16(20000 + 1000*i)
			r, err := l.Flood(context.Background(), i, fleetlab.Flood{
				Count: uint64(rate * s.Dur.Seconds()), Src: s.Src, Sources: s.Sources,
				SrcPorts: [2]uint16{first, first + 63}, DstPort: s.DstPort, Payload: 18,
				Rate: rate, Timeout: s.Dur + 15*time.Second,
			})
			mu.Lock()
			defer mu.Unlock()
			res.Sent[i], res.Gaps[i], errs[k] = r.Sent, r.Gaps, err
			res.Total += r.Sent
			res.Elapsed = max(res.Elapsed, r.Elapsed)
		})
	}
	return func(t *testing.T) spreadResult {
		t.Helper()
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		return res
	}
}
