// SPDX-License-Identifier: Apache-2.0

package droplog_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/compiler"
	"github.com/xdplimit/xdplimit/droplog"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/loader"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

// A DNS-amplification-like flood: UDP from port 53, 512 bytes of payload,
// TTL 250, one source; the rule lets through one packet, then drops.
const floodPolicy = `
rules:
  - name: dns-amp
    match: {protocol: udp, src_ports: [53]}
    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}
log: {sample: 1/16, max_per_second: 100000}
`

// floodFrames is the flood's size: ~12,500 samples at one in 16.
const floodFrames = 200_000

// TestDropLogFlood floods a veth from the live-frames generator into the
// limiter, logs the drops while a second reader (as top) reads the same
// ring, and checks that one in 16 drops was sampled (every sample either
// logged or counted as suppressed; within 5% of drops/16, about five
// standard deviations) and that every line describes the flood.
func TestDropLogFlood(t *testing.T) {
	testutil.RequireLiveFrames(t)
	img, p := xdpltest.CompilePolicy(t, floodPolicy)
	datapath, keep := compiler.SampleOneIn(p.Log)
	if datapath != 16 || keep != 1 {
		t.Fatalf("one in 16 split as %d and keep %v", datapath, keep)
	}

	v, a := xdpltest.AttachNative(t, "xd", loader.Config{MaxSources: 1 << 12,
		Policy: loader.Policy{Image: img, Path: "flood.yaml", SHA256: p.SHA256, Log: p.Log}})

	var out testutil.SyncBuffer
	l, err := droplog.New(a.Interface, a.Limiter, droplog.Settings{Keep: keep, MaxPerSecond: p.Log.RateCap()},
		&out, nil, droplog.NewMetrics(a.Interface), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	dropsBefore := drops(t, a.Limiter)
	// Lines carry the wall-clock time the reader took the sample (UTC):
	// every one between the reader's start and its close, in order.
	// Round(0) drops the monotonic reading, which parsed times lack.
	begin := time.Now().Round(0)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var topWritten uint64
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := l.Run(ctx, 2*time.Millisecond); err != nil {
			t.Error(err)
		}
	}()
	go func() { // top's reader: its own cursor on the same ring
		defer wg.Done()
		topWritten = readLikeTop(t, ctx, a.Limiter)
	}()

	src, dst := netip.MustParseAddr("198.18.5.7"), v.PeerAddr
	res := floodFrom(t, v, src, dst)
	time.Sleep(20 * time.Millisecond)
	cancel()
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	end := time.Now().Round(0)
	dropped := drops(t, a.Limiter) - dropsBefore
	t.Logf("sent %v; %d dropped", res, dropped)

	lines, summaries := parse(t, out.String())
	suppressed := 0.0
	for _, s := range summaries {
		suppressed += s.Suppressed
	}
	sampled := float64(len(lines)) + suppressed
	want := float64(dropped) / 16
	t.Logf("%d lines, %v suppressed (over the cap, behind the output or overwritten in the ring): %v sampled, want %.0f ± 5%%; top's reader saw %d written",
		len(lines), suppressed, sampled, want, topWritten)
	if dropped < floodFrames/2 || math.Abs(sampled-want) > 0.05*want {
		t.Errorf("sampled %v of %d drops, want one in 16 (%.0f ± 5%%)", sampled, dropped, want)
	}
	if len(lines) < 1000 {
		t.Errorf("only %d lines logged", len(lines))
	}
	if uint64(sampled) != topWritten {
		t.Errorf("the log accounts for %v samples, top's reader for %d: both must see every sample written", sampled, topWritten)
	}
	checkFloodLines(t, lines, begin, end, a.Interface, src, dst)
}

// floodFrom sends floodFrames UDP frames from src (port 53, TTL 250, 512
// bytes of payload) to dst over v.
func floodFrom(t *testing.T, v *testutil.Veth, src, dst netip.Addr) pktgen.Result {
	g, err := pktgen.Open(pktgen.Config{Sources: pktgen.Sources{Mode: pktgen.Fixed, First: src}, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	frame := pktgen.SetMACs(pktgen.Frame{Src: src, Dst: dst, TTL: 250, SrcPort: 53, DstPort: 40000, Payload: 512}.MustBuild(),
		v.MAC, v.PeerMAC)
	res, err := g.Send(context.Background(), v.NS.Path(), v.Name, frame, floodFrames)
	g.Close()
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// checkFloodLines: every line was taken between begin and end, in order,
// in UTC, and describes the flood from src to dst on iface.
func checkFloodLines(t *testing.T, lines []droplog.Line, begin, end time.Time, iface string, src, dst netip.Addr) {
	var prev time.Time
	for i, ln := range lines {
		if ln.Time.Before(begin) || ln.Time.After(end) || ln.Time.Before(prev) || ln.Time.Location() != time.UTC {
			t.Fatalf("line %d: time %v, want UTC, from %v to %v and not before the previous line's %v",
				i, ln.Time, begin.UTC(), end.UTC(), prev)
		}
		prev = ln.Time
		want := droplog.Line{Event: "drop", Time: ln.Time, Interface: iface, Rule: "dns-amp", Level: ln.Level,
			Action: "drop", Src: src.String(), Dst: dst.String(), Proto: "udp", SrcPort: ln.SrcPort, DstPort: ln.DstPort,
			Length: 20 + 8 + 512, TTL: 250}
		if ln.Level == nil || *ln.Level != 0 || ln.SrcPort == nil || *ln.SrcPort != 53 || ln.DstPort == nil ||
			*ln.DstPort != 40000 || fmt.Sprint(ln) != fmt.Sprint(want) {
			t.Fatalf("line %d: %+v, want the flood's fields", i, ln)
		}
	}
}

// readLikeTop reads the ring as top does until ctx ends, and returns how
// many samples were written meanwhile.
func readLikeTop(t *testing.T, ctx context.Context, l *maps.Limiter) uint64 {
	_, _, cursor, err := l.DropRing(nil)
	if err != nil {
		t.Error(err)
		return 0
	}
	var total uint64
	for {
		done := ctx.Err() != nil
		_, written, next, err := l.DropRing(cursor)
		if err != nil {
			t.Error(err)
			return total
		}
		total, cursor = total+written, next
		if done {
			return total
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func drops(t *testing.T, l *maps.Limiter) uint64 {
	rules, err := l.RuleStats()
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, r := range rules {
		n += r.Verdicts[maps.VerdictDrop].Packets
	}
	return n
}

type summary struct {
	Event      string
	Suppressed float64
}

// parse splits a log into its drop lines and its summaries.
func parse(t *testing.T, log string) (lines []droplog.Line, summaries []summary) {
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		var s summary
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if s.Event == "suppressed" {
			summaries = append(summaries, s)
			continue
		}
		var ln droplog.Line
		if err := json.Unmarshal(sc.Bytes(), &ln); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		lines = append(lines, ln)
	}
	return lines, summaries
}

// A logger told FromStart logs the drops sampled before it started (those
// of a limiter attached moments before it), and one not told starts from
// New; Close logs what was sampled after the last poll. Every sample the
// rings hold is accounted for, exactly: none wrapped.
func TestDropLogFromStartAndClose(t *testing.T) {
	img, p := xdpltest.CompilePolicy(t, floodPolicy)
	l := xdpltest.LoadImage(t, maps.Options{MaxSources: 1 << 12, Clock: maps.ClockMap}, img)
	frame := pktgen.Frame{Src: netip.MustParseAddr("198.18.5.7"), Dst: netip.MustParseAddr("10.0.0.1"), TTL: 250,
		SrcPort: 53, DstPort: 40000, Payload: 512}.MustBuild()
	sampled := func() uint64 { // every sample the rings hold, from their start
		_, written, _, err := l.DropRing(nil)
		if err != nil {
			t.Fatal(err)
		}
		return written
	}
	floodTo := func(n uint64) { // ~16 drops a sample
		t.Helper()
		for sampled() < n && !t.Failed() {
			for range 64 {
				xdpltest.Run(t, l, frame, time.Second)
			}
		}
	}
	logger := func() (*droplog.Logger, *testutil.SyncBuffer) {
		var out testutil.SyncBuffer
		lg, err := droplog.New("xd0", l, droplog.Settings{Keep: 1, MaxPerSecond: p.Log.RateCap()}, &out, nil,
			droplog.NewMetrics("xd0"), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return lg, &out
	}
	accounted := func(out *testutil.SyncBuffer) uint64 {
		lines, summaries := parse(t, out.String())
		n := uint64(len(lines))
		for _, s := range summaries {
			n += uint64(s.Suppressed)
		}
		return n
	}

	floodTo(1000)
	before := sampled()
	fromStart, all := logger()
	fromStart.FromStart()
	fromNew, since := logger()
	for _, lg := range []*droplog.Logger{fromStart, fromNew} {
		if err := lg.Poll(); err != nil {
			t.Fatal(err)
		}
	}
	floodTo(before + 1000) // after the last poll: read by Close only
	total := sampled()
	for _, lg := range []*droplog.Logger{fromStart, fromNew} {
		if err := lg.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if got := accounted(all); got != total {
		t.Errorf("from the start: %d samples logged or suppressed, want all %d written", got, total)
	}
	if got := accounted(since); got != total-before {
		t.Errorf("from New: %d samples logged or suppressed, want the %d written after it", got, total-before)
	}
}
