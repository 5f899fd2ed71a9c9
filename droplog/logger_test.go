// SPDX-License-Identifier: Apache-2.0

package droplog

import (
	"bufio"
	"encoding/json"
	"io"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/maps"
)

// fakeRing hands out the samples queued since the last read, claiming
// lost more were written (a wrapped ring).
type fakeRing struct {
	queued []maps.DropSample
	lost   uint64
	names  map[uint32]string
}

func (f *fakeRing) DropRing(cursor []uint64) ([]maps.DropSample, uint64, []uint64, error) {
	s, lost := f.queued, f.lost
	f.queued, f.lost = nil, 0
	return s, uint64(len(s)) + lost, []uint64{0}, nil
}

func (f *fakeRing) SlotNames() (map[uint32]string, error) { return f.names, nil }

// jsonLines parses what a logger wrote.
func jsonLines(t *testing.T, b *testutil.SyncBuffer) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(b.String()))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

func sample(src string) maps.DropSample {
	return maps.DropSample{Source: netip.MustParseAddr(src), Destination: netip.MustParseAddr("10.0.0.1"),
		Verdict: maps.VerdictDrop, Slot: 3, Level: 1, IPLength: 540, Protocol: 17, HasPorts: true,
		SrcPort: 53, DstPort: 40000, TTL: 250, TOS: 0xb8}
}

// The JSON of one line is the documented format, field for field.
func TestLineFormat(t *testing.T) {
	at := time.Date(2026, 11, 23, 21, 0, 0, 123456789, time.FixedZone("x", 3600))
	got := string(encode(lineOf(sample("192.0.2.7"), "eth0", "dns-amp", at)))
	want := `{"event":"drop","time":"2026-11-23T20:00:00.123456789Z","interface":"eth0","rule":"dns-amp","level":1,` +
		`"action":"drop","src":"192.0.2.7","dst":"10.0.0.1","proto":"udp","sport":53,"dport":40000,"len":540,"ttl":250,"tos":184}` + "\n"
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	deny := sample("2001:db8::1")
	deny.Deny, deny.Level, deny.HasPorts, deny.Protocol, deny.Destination = true, maps.NoLevel, false, 58, netip.MustParseAddr("2001:db8::2")
	got = string(encode(lineOf(deny, "eth0", "_deny", at)))
	want = `{"event":"drop","time":"2026-11-23T20:00:00.123456789Z","interface":"eth0","rule":"_deny",` +
		`"action":"deny","src":"2001:db8::1","dst":"2001:db8::2","proto":"icmpv6","len":540,"ttl":250,"tos":184}` + "\n"
	if got != want {
		t.Errorf("deny list, no ports, no level:\ngot  %s\nwant %s", got, want)
	}
	ban := sample("192.0.2.9")
	ban.Ban, ban.Level = true, maps.NoLevel
	got = string(encode(lineOf(ban, "eth0", "_ban", at)))
	want = `{"event":"drop","time":"2026-11-23T20:00:00.123456789Z","interface":"eth0","rule":"_ban",` +
		`"action":"ban","src":"192.0.2.9","dst":"10.0.0.1","proto":"udp","sport":53,"dport":40000,"len":540,"ttl":250,"tos":184}` + "\n"
	if got != want {
		t.Errorf("a banned source:\ngot  %s\nwant %s", got, want)
	}
	shadow := sample("192.0.2.7")
	shadow.Verdict = maps.VerdictShadow
	if a := lineOf(shadow, "eth0", "r", at).Action; a != "shadow" {
		t.Errorf("shadow action %q", a)
	}
}

// The cap admits max lines per clock second; the rest are counted, and a
// summary line follows once the second is over.
func TestRateCapAndSummary(t *testing.T) {
	ring := &fakeRing{names: map[uint32]string{3: "dns-amp"}}
	var out testutil.SyncBuffer
	now := time.Unix(1000, 0)
	m := NewMetrics("eth0")
	l, err := New("eth0", ring, Settings{Keep: 1, MaxPerSecond: 5}, &out, nil, m, func() time.Time { return now }, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 8 {
		ring.queued = append(ring.queued, sample("192.0.2.7"))
	}
	ring.lost = 4
	poll := func() {
		t.Helper()
		if err := l.Poll(); err != nil {
			t.Fatal(err)
		}
	}
	poll() // second 1000: 5 lines, 3 over the cap, 4 lost in the ring
	now = now.Add(500 * time.Millisecond)
	ring.queued = []maps.DropSample{sample("192.0.2.8")}
	poll() // still second 1000: refused, no summary yet
	now = now.Add(600 * time.Millisecond)
	ring.queued = []maps.DropSample{sample("192.0.2.9")}
	poll() // second 1001: the summary of 1000, then a line
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	lines := jsonLines(t, &out)
	if len(lines) != 7 {
		t.Fatalf("%d lines, want 5 + summary + 1: %v", len(lines), lines)
	}
	for i, ln := range lines[:5] {
		if ln["event"] != "drop" || ln["rule"] != "dns-amp" || ln["src"] != "192.0.2.7" {
			t.Errorf("line %d: %v", i, ln)
		}
	}
	s := lines[5]
	if s["event"] != "suppressed" || s["suppressed"] != 8.0 || s["rate_cap"] != 4.0 || s["ring"] != 4.0 || s["backlog"] != 0.0 {
		t.Errorf("summary %v, want 8 suppressed: 4 over the cap, 4 lost in the ring", s)
	}
	if lines[6]["src"] != "192.0.2.9" {
		t.Errorf("last line %v", lines[6])
	}
	if got := value(m.suppressed.WithLabelValues(ReasonRate)); got != 4 {
		t.Errorf("suppressed{rate_cap} %v, want 4", got)
	}
	if got := value(m.lines); got != 7 {
		t.Errorf("lines_total %v, want 7", got)
	}
}

// Keep < 1 logs that share of the samples; a stalled output fills the
// bounded queue and the rest count as backlog, without blocking Poll.
func TestKeepAndBacklog(t *testing.T) {
	ring := &fakeRing{}
	r := 0.0
	random := func() float64 { r += 0.1; return r - float64(int(r)) } // 0.1, 0.2, ... 0.9, 0.0, ...
	block := make(chan struct{})
	out := blockingWriter{block: block}
	m := NewMetrics("eth0")
	l, err := New("eth0", ring, Settings{Keep: 0.25, MaxPerSecond: 100000}, out, nil, m, nil, random)
	if err != nil {
		t.Fatal(err)
	}
	for range 100000 {
		ring.queued = append(ring.queued, sample("192.0.2.7"))
	}
	done := make(chan error)
	go func() { done <- l.Poll() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Poll blocked on a stalled output")
	}
	// 0.1 and 0.2 of every ten draws pass (r < 0.25): 20% of 100000, and
	// 0.0 sometimes; the queue holds backlog of them, one more is in the
	// writer's hands.
	kept := value(m.suppressed.WithLabelValues(ReasonBacklog)) + backlog + 1
	if kept < 19000 || kept > 31000 {
		t.Errorf("%v lines kept of 100000 at keep 0.25", kept)
	}
	close(block)
	l.Close()
}

// A summary is what accounts for the lines a stalled output lost: one
// that finds the queue full stays pending and goes out at the next poll
// with room, and Close waits for room for the last one. Every sample is
// then a line or counted in a summary.
func TestSummaryWaitsForRoom(t *testing.T) {
	const n = backlog + 500
	for _, at := range []string{"a later poll", "close"} {
		t.Run(at, func(t *testing.T) {
			ring := &fakeRing{}
			block := make(chan struct{})
			var buf testutil.SyncBuffer
			out := blockingWriter{block: block, w: &buf}
			now := time.Unix(1000, 0)
			m := NewMetrics("eth0")
			l, err := New("eth0", ring, Settings{Keep: 1, MaxPerSecond: 100000}, out, nil, m,
				func() time.Time { return now }, nil)
			if err != nil {
				t.Fatal(err)
			}
			for range n {
				ring.queued = append(ring.queued, sample("192.0.2.7"))
			}
			poll := func() {
				t.Helper()
				if err := l.Poll(); err != nil {
					t.Fatal(err)
				}
			}
			poll()                                 // second 1000: the queue fills, the rest are backlog
			now = now.Add(1500 * time.Millisecond) // the summary is due, the queue still full
			poll()
			if at == "close" {
				go func() { time.Sleep(50 * time.Millisecond); close(block) }()
			} else {
				close(block)
				// Room now: the summary refused at 1001 goes out at the
				// next poll, written after the queue's lines.
				for deadline := time.Now().Add(10 * time.Second); len(l.out.queue) > 0; time.Sleep(time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("the output left %d lines queued", len(l.out.queue))
					}
				}
				poll()
				summarized := func() bool {
					got := jsonLines(t, &buf)
					return len(got) > 0 && got[len(got)-1]["event"] == "suppressed"
				}
				for deadline := time.Now().Add(10 * time.Second); !summarized(); time.Sleep(time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatal("after the output drained, the poll wrote no summary")
					}
				}
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			accounted := 0.0
			for _, ln := range jsonLines(t, &buf) {
				if ln["event"] == "suppressed" {
					accounted += ln["suppressed"].(float64)
				} else {
					accounted++
				}
			}
			if accounted != n {
				t.Errorf("the log accounts for %v samples, want all %d: a summary was lost", accounted, n)
			}
		})
	}
}

// blockingWriter waits for block to close, then writes to w (discards
// when w is nil).
type blockingWriter struct {
	block chan struct{}
	w     io.Writer
}

func (w blockingWriter) Write(p []byte) (int, error) {
	<-w.block
	if w.w == nil {
		return len(p), nil
	}
	return w.w.Write(p)
}

func TestOpenAppends(t *testing.T) {
	path := t.TempDir() + "/drops.jsonl"
	for _, s := range []string{"one\n", "two\n"} {
		w, c, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(s))
		c.Close()
	}
	b, err := readFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if b != "one\ntwo\n" {
		t.Errorf("file %q, want both runs' lines", b)
	}
	if fi, err := statMode(path); err != nil || fi != 0o640 {
		t.Errorf("mode %o (%v), want 640", fi, err)
	}
	if w, c, err := Open("-"); err != nil || c != nil || w == nil {
		t.Errorf("stdout: %v %v %v", w, c, err)
	}
}

func readFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	return string(b), err
}

func statMode(path string) (os.FileMode, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return fi.Mode().Perm(), nil
}

func value(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}
