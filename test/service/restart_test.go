// SPDX-License-Identifier: Apache-2.0

package service

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/pktgen"
)

// The flood's limit: a token bucket of 200 packets a second with a
// second's burst (a burst of 100 ms of rate or more keeps a veth flood's
// admissions at rate × time; a shorter one admits less). One millisecond
// without the program would let hundreds of the flood's frames through.
const (
	floodRate  = 200
	floodBurst = 200
	floodRule  = "rules:\n  - name: flood\n    match: {protocol: udp, src_cidrs: [198.18.0.1/32]}\n" +
		"    limit: {algorithm: token_bucket, rate: 200/s, burst: 200}\n"
	bannedPrefix = "198.51.100.0/24"
)

// floodLab is a sender and a receiver namespace joined by a veth pair, and
// a live-frames generator.
type floodLab struct {
	*testutil.Veth
	gen *pktgen.Generator
}

func newFloodLab(t *testing.T) *floodLab {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.RequireLiveFrames(t)
	id := testutil.UniqueID(t, "xrs", "xrr")
	v := testutil.NewVethPair(t, testutil.VethConfig{Name: "xrs" + id, PeerName: "xrr" + id})
	g, err := pktgen.Open(pktgen.Config{Timeout: time.Minute})
	must(t, err)
	t.Cleanup(func() { g.Close() })
	return &floodLab{Veth: v, gen: g}
}

// frames are the flood's two sources: the limited one (the sender's own
// address) and one in the banned prefix (the receiver accepts it:
// rp_filter is off).
func (l *floodLab) frames() (limited, banned []byte) {
	f := pktgen.Frame{SrcMAC: l.MAC, DstMAC: l.PeerMAC, Src: l.Addr, Dst: l.PeerAddr, SrcPort: 40000, DstPort: 9, Payload: 18}
	limited = f.MustBuild()
	f.Src = prefix("198.51.100.7/32").Addr()
	return limited, f.MustBuild()
}

// flood runs until stopped: chunks from the limited source and from the
// banned one, alternately, bounded in frames and by the generator's
// timeout.
type flood struct {
	stop chan struct{}
	done chan error
	mu   sync.Mutex
	sent uint64
}

// maxFloodFrames bounds a flood that a failing test forgets to stop.
const maxFloodFrames = 400_000_000

func (l *floodLab) startFlood(t *testing.T) *flood {
	t.Helper()
	limited, banned := l.frames()
	f := &flood{stop: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		for {
			select {
			case <-f.stop:
				f.done <- nil
				return
			default:
			}
			for _, c := range []struct {
				frame []byte
				n     uint64
			}{{limited, 50_000}, {banned, 5_000}} {
				r, err := l.gen.Send(context.Background(), l.NS.Path(), l.Name, c.frame, c.n)
				f.mu.Lock()
				f.sent += r.Sent
				total := f.sent
				f.mu.Unlock()
				if err != nil || total > maxFloodFrames {
					f.done <- err
					return
				}
			}
		}
	}()
	t.Cleanup(func() { f.end(t) })
	return f
}

// end stops the flood and returns the frames sent.
func (f *flood) end(t *testing.T) uint64 {
	t.Helper()
	select {
	case <-f.stop:
	default:
		close(f.stop)
		if err := <-f.done; err != nil {
			t.Errorf("flood: %v", err)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sent
}

// restartUnderFlood restarts the unit's instance on l.PeerName `times`
// times as systemd does (SIGTERM, then ExecStart), each time waiting for
// the new process to have adopted the limiter, while the flood runs; the
// program must never leave the interface and the ban must survive every
// restart. It returns the last instance.
func restartUnderFlood(t *testing.T, l *floodLab, p *instance, bin, etc string, times int) *instance {
	t.Helper()
	for i := range times {
		if err := p.stop(t); err != nil {
			t.Fatalf("restart %d: the stopping process exited with %v:\n%s", i, err, p.out)
		}
		if !strings.Contains(p.out.String(), "the limiter stays attached") {
			t.Errorf("restart %d: the exit does not say the limiter stays:\n%s", i, p.out)
		}
		p = start(t, l.PeerNS, unitLine(t, "ExecStart", l.PeerName, bin, etc))
		p.waitFor(t, "adopted=true", testutil.MachineWait)
		if b := bans(t, bin, l.PeerName); len(b) != 1 || b[0].Prefix != bannedPrefix {
			t.Fatalf("restart %d: bans %+v, want %s", i, b, bannedPrefix)
		}
	}
	return p
}

// measurement is a flood with the XDP program and the receiver's stack
// watched while it runs.
type measurement struct {
	l      *floodLab
	f      *flood
	watch  *xdpWatch
	before testutil.Counters
	begin  time.Time
}

// measure starts watching the program and the stack, and the flood, which
// then runs for a second against the process attached now.
func (l *floodLab) measure(t *testing.T) *measurement {
	t.Helper()
	m := &measurement{l: l, watch: watchXDP(t, l.PeerNS, l.PeerName), before: l.PeerNS.Snapshot(t), begin: time.Now()}
	m.f = l.startFlood(t)
	time.Sleep(time.Second)
	return m
}

// check lets the flood run a second more, stops it, and checks: the
// interface never lost its program; what reached the stack is within what
// the limit admits over the flood's length, that is bursts full buckets (a
// migration starts the sources' state afresh), the rate over the length
// with 5% for the clock, and 50 packets of the namespaces' own background
// (neighbour discovery, MLD); the ban held and dropped.
func (m *measurement) check(t *testing.T, bin string, bursts int) {
	t.Helper()
	time.Sleep(time.Second)
	sent := m.f.end(t)
	elapsed := time.Since(m.begin)
	reached := m.l.PeerNS.Settle(t).Delta(m.before).IPReceives()
	polls, missing, programs := m.watch.end(t)
	t.Logf("XDP program checked %d times, missing %d times; %d program ids seen", polls, missing, programs)
	if missing > 0 {
		t.Errorf("the interface had no XDP program at %d of %d checks", missing, polls)
	}
	allowed := float64(bursts*floodBurst) + floodRate*elapsed.Seconds()*1.05 + 50
	t.Logf("flood: %d frames sent in %v; %d reached the stack, the limit allows %.0f", sent, elapsed.Round(time.Millisecond), reached, allowed)
	if float64(reached) > allowed {
		t.Errorf("%d packets reached the stack during the flood, more than the limit allows (%.0f): it passed beyond its limit", reached, allowed)
	}
	if sent < 1_000_000 {
		t.Errorf("the flood sent %d frames only: too few to see a gap", sent)
	}
	if b := bans(t, bin, m.l.PeerName); len(b) != 1 || b[0].Dropped == 0 {
		t.Errorf("bans at the end: %+v, want the ban, having dropped the banned source's frames", b)
	}
}

// TestRestartUnderFlood: the unit's instance restarted three times under a
// flood, with a manual ban in force: the program never leaves the
// interface, the flood never passes beyond its limit at the stack, and the
// ban survives, dropping its source's frames throughout.
func TestRestartUnderFlood(t *testing.T) {
	l := newFloodLab(t)
	bin := testutil.XdplimitBin(t)
	etc := t.TempDir()
	writePolicy(t, etc, l.PeerName, floodRule)
	cleanPins(t, l.PeerName)

	p := start(t, l.PeerNS, unitLine(t, "ExecStart", l.PeerName, bin, etc))
	p.waitFor(t, "msg=attached", testutil.MachineWait)
	if out, err := run(t, bin, "ban", l.PeerName, bannedPrefix, "--for", "1h", "--reason", "restart test"); err != nil {
		t.Fatalf("ban: %v\n%s", err, out)
	}
	m := l.measure(t)
	p = restartUnderFlood(t, l, p, bin, etc, 3)
	m.check(t, bin, 1)
}

// previousLayoutCommit is the last commit of this repository with map
// layout 7, the last released; the current layout (maps.LayoutVersion) is
// newer, and the ban table is what the two have in common (the migration:
// loader/migrate.go). It is kept in testdata,
// where make test-vm reads it too, to build that binary for the VM.
func previousLayoutCommit(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("testdata/previous-layout-commit")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// previousBinEnv names a binary built at previousLayoutCommit, where the
// test cannot build it (the VM has neither git nor Go).
const previousBinEnv = "XDPLIMIT_PREVIOUS_BIN"

// buildAt builds cmd/xdplimit as it was at commit, from this repository's
// history, unless previousBinEnv names it. A clone without the commit (a
// shallow one) cannot run the test: a failure in CI (which clones the full
// history), a skip elsewhere.
func buildAt(t *testing.T, commit string) string {
	t.Helper()
	if bin := os.Getenv(previousBinEnv); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("%s: %v", previousBinEnv, err)
		}
		return bin
	}
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	testutil.Require(t, err == nil, "needs the git repository of this checkout: %v", err)
	repo := strings.TrimSpace(string(root))
	err = exec.Command("git", "-C", repo, "cat-file", "-e", commit+"^{commit}").Run()
	testutil.Require(t, err == nil, "commit %s is not in this clone's history (a shallow clone?)", commit)
	dir := t.TempDir()
	archive := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", repo, commit, dir)
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", commit, err, out)
	}
	bin := filepath.Join(dir, "xdplimit-old")
	build := exec.Command("go", "build", "-o", bin, "./cmd/xdplimit")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod -buildvcs=false", "GOWORK=off", "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building xdplimit at %s: %v\n%s", commit, err, out)
	}
	return bin
}

// TestUpgradeUnderFlood: a limiter attached by the previous map layout's
// xdplimit (with --keep-on-exit, as its documentation said to upgrade
// without a gap), with a manual ban, is upgraded under a flood to this
// binary by the unit's ExecStart: the new process migrates it, the program
// never leaves the interface, the flood never passes beyond its limit (one
// more burst: the sources' state starts afresh across layouts), and the
// ban survives. A restart of the new unit follows.
func TestUpgradeUnderFlood(t *testing.T) {
	l := newFloodLab(t)
	old := buildAt(t, previousLayoutCommit(t))
	bin := testutil.XdplimitBin(t)
	out, err := exec.Command(old, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "map layout 7") {
		t.Fatalf("the previous binary: %v, %s", err, out)
	}
	etc := t.TempDir()
	path := writePolicy(t, etc, l.PeerName, floodRule)
	cleanPins(t, l.PeerName)

	p := start(t, l.PeerNS, []string{old, "attach", l.PeerName, "--policy", path, "--keep-on-exit"})
	p.waitFor(t, "msg=attached", testutil.MachineWait)
	if out, err := run(t, old, "ban", l.PeerName, bannedPrefix, "--for", "1h", "--reason", "before the upgrade"); err != nil {
		t.Fatalf("ban with the previous binary: %v\n%s", err, out)
	}
	m := l.measure(t)
	if err := p.stop(t); err != nil {
		t.Fatalf("the previous attach exited with %v:\n%s", err, p.out)
	}
	p = start(t, l.PeerNS, unitLine(t, "ExecStart", l.PeerName, bin, etc))
	p.waitFor(t, "adopted=true", testutil.MachineWait)
	if !strings.Contains(p.out.String(), "replaced a limiter of another map layout without a gap") ||
		!strings.Contains(p.out.String(), "from_layout=7") {
		t.Errorf("no migration from layout 7 logged:\n%s", p.out)
	}
	b := bans(t, bin, l.PeerName)
	if len(b) != 1 || b[0].Prefix != bannedPrefix || b[0].Reason != "before the upgrade" || b[0].Origin != "manual" {
		t.Fatalf("bans after the upgrade: %+v", b)
	}
	p = restartUnderFlood(t, l, p, bin, etc, 1)
	m.check(t, bin, 2)
}
