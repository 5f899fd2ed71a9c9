// SPDX-License-Identifier: Apache-2.0

package metrics_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/loader"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/metrics"
	"github.com/xdplimit/xdplimit/pktgen"
)

const e2ePolicy = `
rules:
  - name: flood
    match: {protocol: udp, dst_ports: [9]}
    limit: {algorithm: token_bucket, rate: 500/s, burst: 50}
  - name: other
    match: {protocol: udp, dst_ports: [10]}
    limit: {algorithm: token_bucket, rate: 10M/s, burst: 10M}
deny: [198.18.200.0/24]
`

// TestPrometheusEndToEnd attaches the limiter natively to the receiving
// end of a veth pair, serves its collector, lets Debian's Prometheus scrape
// it every second during a flood from the live-frames generator, and
// requires the pass and drop totals Prometheus reports to equal what the
// receiving stack counted (its SNMP counters) and what the generator sent
// less what the veth's full ring turned away before the limiter.
func TestPrometheusEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Prometheus and floods a veth (about 15 s); not with -short")
	}
	testutil.RequireLiveFrames(t)
	promBin, err := exec.LookPath("prometheus")
	testutil.Require(t, err == nil, "prometheus not found (Debian package prometheus; run bash scripts/deps.sh)")

	img, p := xdpltest.CompilePolicy(t, e2ePolicy)
	pol := loader.Policy{Image: img, Path: "e2e.yaml", SHA256: p.SHA256}
	v, a := xdpltest.AttachNative(t, "xm", loader.Config{Clock: maps.ClockKtime, MaxSources: 1 << 16, Policy: pol})

	e := metrics.New(nil)
	if err := e.Add(a.Interface, a.Limiter, 0); err != nil {
		t.Fatal(err)
	}
	// A reload of the same policy, as SIGHUP would do, from the
	// interface's namespace as the attach process does: it reads the
	// interface's MTU by index there.
	if err := v.PeerNS.Do(func() error { return a.Reload(pol) }); err != nil {
		t.Fatalf("reload: %v", err)
	}
	e.ReloadResult(a.Interface, nil)

	prom := startPrometheus(t, promBin, serveExporter(t, e))
	prom.waitUp(t, testutil.MachineWait)

	before := v.PeerNS.Snapshot(t)
	rx := v.PeerNS.RxSeen(t, v.PeerName)
	sent, reachedBatch := floodE2E(t, v)
	reached := reachedBatch[0] + reachedBatch[1] + reachedBatch[2]
	v.PeerNS.WaitRx(t, v.PeerName, rx, sent)
	received := v.PeerNS.Settle(t).Delta(before).IPInReceives
	dropped := reached - min(received, reached)
	t.Logf("sent %d, %d reached the limiter, the receiving stack counted %d IPv4 packets: %d dropped by the limiter",
		sent, reached, received, dropped)
	if received == 0 || dropped == 0 {
		t.Fatalf("the flood should be partly passed and partly dropped")
	}

	sel := fmt.Sprintf(`interface=%q`, a.Interface)
	checks := []promCheck{
		// The receiver sees IPv4 traffic only from the two rules.
		{fmt.Sprintf(`sum(xdplimit_packets_total{%s,rule=~"flood|other",verdict="pass"})`, sel), float64(received)},
		{fmt.Sprintf(`sum(xdplimit_packets_total{%s,verdict="drop"})`, sel), float64(dropped)},
		{fmt.Sprintf(`xdplimit_packets_total{%s,rule="_deny",verdict="drop"}`, sel), float64(reachedBatch[2])},
		{fmt.Sprintf(`xdplimit_packets_total{%s,rule="other",verdict="pass"}`, sel), float64(reachedBatch[1])},
		{fmt.Sprintf(`sum(xdplimit_bytes_total{%s,verdict=~"pass|drop",rule=~"flood|other|_deny"})`, sel),
			float64(reached * uint64(len(pktgen.UDP4(v.Addr, v.PeerAddr, 1, 9, 18))))},
		{fmt.Sprintf(`xdplimit_level_drops_total{%s,rule="flood",level="0"}`, sel), float64(dropped - reachedBatch[2])},
		// 64 flood sources and the one "other" source; denied packets
		// create no entry.
		{fmt.Sprintf(`xdplimit_tracked_sources{%s}`, sel), 65},
		{fmt.Sprintf(`xdplimit_source_table_capacity{%s}`, sel), 1<<16 + 1<<14}, // the IPv4 table and the other keys' (a quarter)
		{fmt.Sprintf(`xdplimit_policy_reloads_total{%s,result="success"}`, sel), 1},
		{fmt.Sprintf(`xdplimit_policy_info{%s,sha256=%q}`, sel, hex.EncodeToString(p.SHA256[:])), 1},
		{fmt.Sprintf(`xdplimit_program_info{%s,mode="native",prog_id="%d"}`, sel, progID(t, a)), 1},
		{fmt.Sprintf(`xdplimit_up{%s}`, sel), 1},
	}
	// Scrapes run every second: wait for one after the flood settled.
	prom.expect(t, checks, time.Now().Add(20*time.Second))
	if t.Failed() {
		t.Logf("exporter now:\n%s", dump(t, e))
	}
}

// serveExporter serves e on a port of the loopback until the test ends,
// and returns its address.
func serveExporter(t *testing.T, e *metrics.Exporter) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- e.ServeListener(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("exporter: %v", err)
		}
	})
	return ln.Addr().String()
}

// floodE2E sends the test's three batches into v, and returns what the
// generator sent and, by batch, what reached the limiter.
func floodE2E(t *testing.T, v *testutil.Veth) (sent uint64, reachedBatch [3]uint64) {
	// The flood: 64 sources over the per-source limit, one source within a
	// generous rule, one on the deny list. One sending thread, so that the
	// receiver's NAPI runs in the sender's softirq and the veth's ring
	// seldom overflows; what it turns away (rx_dropped, counted as each
	// frame is refused) never reached the limiter, and each batch is
	// counted as the frames that did.
	for i, f := range []struct {
		dport uint16
		src   pktgen.Sources
		count uint64
	}{
		{9, pktgen.Sources{Mode: pktgen.Sequential, First: netip.MustParseAddr("198.18.1.0"), Count: 64}, 400_000},
		{10, pktgen.Sources{Mode: pktgen.Fixed, First: netip.MustParseAddr("198.18.2.1")}, 20_000},
		{9, pktgen.Sources{Mode: pktgen.Fixed, First: netip.MustParseAddr("198.18.200.7")}, 30_000},
	} {
		g, err := pktgen.Open(pktgen.Config{Sources: f.src, Timeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		frame := pktgen.SetMACs(pktgen.UDP4(v.Addr, v.PeerAddr, 40000, f.dport, 18), v.MAC, v.PeerMAC)
		ring0 := v.PeerNS.RxDropped(t, v.PeerName)
		res, err := g.Send(context.Background(), v.NS.Path(), v.Name, frame, f.count)
		g.Close()
		// A loaded machine may not send the whole batch in time; every
		// expectation is derived from what was sent, so a batch cut short
		// by the timeout is still judged.
		cut := ""
		if errors.Is(err, pktgen.ErrTimeout) {
			cut, err = " (cut short by the generator's timeout)", nil
		}
		if err != nil {
			t.Fatal(err)
		}
		lost := v.PeerNS.RxDropped(t, v.PeerName) - ring0
		t.Logf("port %d from %v: %v%s; the ring turned away %d", f.dport, f.src.First, res, cut, lost)
		sent += res.Sent
		reachedBatch[i] = res.Sent - min(lost, res.Sent)
	}
	return sent, reachedBatch
}

// promCheck is a PromQL query and the value it must come to.
type promCheck struct {
	query string
	want  float64
}

// expect queries each check until it holds or the deadline passes.
func (p *promServer) expect(t *testing.T, checks []promCheck, deadline time.Time) {
	for _, c := range checks {
		var got float64
		var ok bool
		for {
			got, ok = p.query(t, c.query)
			if (ok && got == c.want) || time.Now().After(deadline) {
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
		if !ok || got != c.want {
			t.Errorf("Prometheus: %s = %v (found %v), want %v", c.query, got, ok, c.want)
		} else {
			t.Logf("Prometheus: %s = %v", c.query, got)
		}
	}
}

func progID(t *testing.T, a *loader.Attachment) uint32 {
	info, err := a.Limiter.Program().Info()
	if err != nil {
		t.Fatal(err)
	}
	id, _ := info.ID()
	return uint32(id)
}

func dump(t *testing.T, e *metrics.Exporter) string {
	var b bytes.Buffer
	for k, v := range scrape(t, e.Registry()) {
		if len(k) > 9 && k[:9] == "xdplimit_" {
			fmt.Fprintf(&b, "%s %v\n", k, v)
		}
	}
	return b.String()
}

// promServer is a Prometheus server started by a test.
type promServer struct {
	base string
	out  *bytes.Buffer
}

// startPrometheus runs Debian's Prometheus on a free loopback port with a
// generated configuration scraping target every second and a temporary
// storage directory. The test's cleanup stops that process, by its pid.
func startPrometheus(t *testing.T, bin, target string) *promServer {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	err := os.WriteFile(cfg, []byte(fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: xdplimit
    static_configs:
      - targets: [%q]
`, target)), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	p := &promServer{base: "http://127.0.0.1:" + strconv.Itoa(port), out: &bytes.Buffer{}}
	cmd := exec.Command(bin,
		"--config.file="+cfg,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address=127.0.0.1:"+strconv.Itoa(port),
		"--log.level=warn")
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	pid := cmd.Process.Pid
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		// SIGTERM to exactly the process we started; SIGKILL if it does
		// not exit in time.
		_ = syscall.Kill(pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(pid, syscall.SIGKILL)
			<-exited
		}
		if t.Failed() {
			t.Logf("prometheus output:\n%s", p.out)
		}
	})

	deadline := time.Now().Add(testutil.MachineWait)
	for {
		resp, err := http.Get(p.base + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		select {
		case <-exited:
			t.Fatalf("prometheus exited:\n%s", p.out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready after %v:\n%s", testutil.MachineWait, p.out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// waitUp waits until Prometheus has scraped the exporter successfully.
func (p *promServer) waitUp(t *testing.T, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if v, ok := p.query(t, `up{job="xdplimit"}`); ok && v == 1 {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("Prometheus never scraped the exporter successfully")
}

// query runs an instant query that must return at most one sample.
func (p *promServer) query(t *testing.T, q string) (float64, bool) {
	t.Helper()
	resp, err := http.Get(p.base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		t.Fatalf("query %s: %v", q, err)
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("query %s: %v", q, err)
	}
	if r.Status != "success" {
		t.Fatalf("query %s: %s", q, r.Error)
	}
	switch len(r.Data.Result) {
	case 0:
		return 0, false
	case 1:
	default:
		t.Fatalf("query %s: %d series, want one", q, len(r.Data.Result))
	}
	s, _ := r.Data.Result[0].Value[1].(string)
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("query %s: value %q", q, s)
	}
	return v, true
}
