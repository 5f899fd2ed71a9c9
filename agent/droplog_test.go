// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/compiler"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/loader"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
	"github.com/xdplimit/xdplimit/policy"
)

// --log-drops=PATH wins over the policy's file; plain --log-drops (or -)
// leaves the choice to the policy, and stdout is the default.
func TestDropLogOutput(t *testing.T) {
	for _, c := range []struct{ flag, file, want string }{
		{"-", "", "-"},
		{"-", "/var/log/p.jsonl", "/var/log/p.jsonl"},
		{"", "/var/log/p.jsonl", "/var/log/p.jsonl"},
		{"/tmp/f.jsonl", "/var/log/p.jsonl", "/tmp/f.jsonl"},
		{"/tmp/f.jsonl", "", "/tmp/f.jsonl"},
	} {
		r := &dropLogRunner{flag: c.flag}
		if got := r.output(policy.Log{File: c.file, Set: true}); got != c.want {
			t.Errorf("--log-drops=%q, log.file %q: output %q, want %q", c.flag, c.file, got, c.want)
		}
	}
}

// A reload applies the log: section: the file it names, and the sample rate
// (the datapath's and the reader's). Runs the program on a frame with
// BPF_PROG_TEST_RUN: no traffic.
func TestDropLogReload(t *testing.T) {
	testutil.RequireRoot(t)
	l, err := maps.Load(maps.Options{Clock: maps.ClockMap, MaxSources: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	d := &dropLogReload{t: t, dir: t.TempDir(), l: l,
		r:     newDropLogRunner(&loader.Attachment{Interface: "test0", Limiter: l}, "", slog.New(slog.DiscardHandler), nil),
		frame: pktgen.UDP4(netip.MustParseAddr("192.0.2.7"), netip.MustParseAddr("10.0.0.1"), 53, 4000, 10)}
	defer d.r.stop()
	d.phase("log: {sample: 1, file: a.jsonl}\n", 50, "a.jsonl", 49)
	// The cap counts lines per wall-clock second: phase one's 49 lines,
	// all written by now, would leave nothing of the second's 10.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
	d.phase("log: {sample: 1, max_per_second: 10, file: b.jsonl}\n", 50, "b.jsonl", 10)
	// The section removed, no --log-drops: the log stops at the reload,
	// before these drops, so neither file gets another line.
	d.reload("")
	d.r.mu.Lock()
	stopped := d.r.l == nil
	d.r.mu.Unlock()
	if !stopped {
		t.Fatal("the drop log still runs after its section was removed")
	}
	if _, err := l.Program().Run(&ebpf.RunOptions{Data: d.frame, Repeat: 50}); err != nil {
		t.Fatal(err)
	}
	// The first packet of the first phase passed (the burst).
	if dr, s := d.lines("a.jsonl"); dr != 49 || s != 0 {
		t.Errorf("a.jsonl: %d drop lines, %d summaries; want 49, 0", dr, s)
	}
	if dr, s := d.lines("b.jsonl"); dr != 10 || s != 1 {
		t.Errorf("b.jsonl: %d drop lines, %d summaries; want the cap's 10 and the summary of 40 written at the stop", dr, s)
	}
}

// dropLogReload is TestDropLogReload's limiter and drop log, the log's
// files in dir.
type dropLogReload struct {
	t     *testing.T
	dir   string
	l     *maps.Limiter
	r     *dropLogRunner
	frame []byte
}

// reload applies a one-rule policy with the log: section log, to the
// limiter and to the drop log, as a reload does.
func (d *dropLogReload) reload(log string) {
	d.t.Helper()
	img, p, err := compiler.CompileYAML(d.dir+"/p.yaml", []byte("rules:\n  - name: r\n    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}\n"+log))
	if err != nil {
		d.t.Fatal(err)
	}
	if err := d.l.Apply(img); err != nil {
		d.t.Fatal(err)
	}
	if err := d.r.apply(p.Log); err != nil {
		d.t.Fatal(err)
	}
}

// lines counts the drop lines and the summaries in the file name.
func (d *dropLogReload) lines(name string) (drops, summaries int) {
	b, err := os.ReadFile(filepath.Join(d.dir, name))
	if err != nil && !os.IsNotExist(err) {
		d.t.Fatal(err)
	}
	for _, ln := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		switch {
		case strings.Contains(ln, `"event":"drop"`):
			drops++
		case strings.Contains(ln, `"event":"suppressed"`):
			summaries++
		}
	}
	return drops, summaries
}

// phase reloads with log, runs drops packets, and waits until file holds
// want drop lines. Each phase waits until its lines are in its file before
// the next reload switches the file: a fixed sleep decided, on a loaded
// machine, which file the reader wrote them to.
func (d *dropLogReload) phase(log string, drops int, file string, want int) {
	d.t.Helper()
	d.reload(log)
	if _, err := d.l.Program().Run(&ebpf.RunOptions{Data: d.frame, Repeat: uint32(drops)}); err != nil {
		d.t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if n, _ := d.lines(file); n >= want {
			return
		}
		if time.Now().After(deadline) {
			n, _ := d.lines(file)
			d.t.Fatalf("%s: %d drop lines 30 s after the drops, want %d", file, n, want)
		}
	}
}
