// SPDX-License-Identifier: Apache-2.0

package fleet

// Readings and waits of the fault tests (faults_test.go): the attach logs
// counted line by line, /metrics by series, /proc by process, floods that
// run while a fault is injected, and the per-host admitted counts.

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testkit/fleetlab"
)

// The log lines of the fleet sync's changes of state (fleet/link.go): one
// each per change, never one per sync.
const (
	downLine = "enforcing with fallback"
	upLine   = "Redis answers"
)

// lines counts the lines of host i's attach output that hold s.
func (f *fleetRun) lines(i int, s string) int {
	n := 0
	for _, line := range strings.Split(f.proc(i).output(), "\n") {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

// waitLines waits until host i's output holds at least n lines with s.
func (f *fleetRun) waitLines(t *testing.T, i, n int, s string, timeout time.Duration) {
	t.Helper()
	p := f.proc(i)
	for deadline := time.Now().Add(timeout); f.lines(i, s) < n; time.Sleep(20 * time.Millisecond) {
		if p.exited() {
			t.Fatalf("host %d: xdplimit exited (%v) before %d lines with %q:\n%s", i, p.err, n, s, p.output())
		}
		if time.Now().After(deadline) {
			t.Fatalf("host %d: %d lines with %q after %v, want %d:\n%s", i, f.lines(i, s), s, timeout, n, p.output())
		}
	}
}

// sample is one scrape's fleet series, by what the fault tests follow.
type sample struct {
	up, syncs, durCount, durSum, keys, remote, hosts, goroutines float64
	errs                                                         map[string]float64 // by kind
}

func fleetSample(t *testing.T, h *fleetlab.Host) sample {
	t.Helper()
	m := scrape(t, h)
	s := sample{errs: map[string]float64{}}
	runtime := false
	for series, v := range m {
		name, labels, _ := strings.Cut(series, "{")
		switch name {
		case "xdplimit_fleet_redis_up":
			s.up = v
		case "xdplimit_fleet_syncs_total":
			s.syncs = v
		case "xdplimit_fleet_sync_duration_seconds_count":
			s.durCount = v
		case "xdplimit_fleet_sync_duration_seconds_sum":
			s.durSum = v
		case "xdplimit_fleet_keys_exchanged_total":
			s.keys = v
		case "xdplimit_fleet_remote_units_applied_total":
			s.remote = v
		case "xdplimit_fleet_live_hosts":
			s.hosts = v
		case "go_goroutines":
			// The runtime's series carry the interface label the
			// process serves, like every other series on the address.
			s.goroutines, runtime = v, true
		case "xdplimit_fleet_sync_errors_total":
			_, kind, _ := strings.Cut(labels, `kind="`)
			kind, _, _ = strings.Cut(kind, `"`)
			s.errs[kind] = v
		}
	}
	if !runtime {
		t.Fatalf("host %d: no go_goroutines on /metrics", h.Index)
	}
	return s
}

func (s sample) errTotal() float64 {
	n := 0.0
	for _, v := range s.errs {
		n += v
	}
	return n
}

// meanSync is the mean duration of the syncs between two samples.
func meanSync(a, b sample) time.Duration {
	if b.durCount <= a.durCount {
		return 0
	}
	return time.Duration((b.durSum - a.durSum) / (b.durCount - a.durCount) * float64(time.Second))
}

// procUsage is what /proc says of a process: resident memory and threads.
type procUsage struct{ rssKB, threads int }

func usage(t *testing.T, p *attachProc) procUsage {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Fatalf("host %d: %v", p.host.Index, err)
	}
	var u procUsage
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		switch k {
		case "VmRSS":
			u.rssKB, _ = strconv.Atoi(f[0])
		case "Threads":
			u.threads, _ = strconv.Atoi(f[0])
		}
	}
	if u.rssKB == 0 || u.threads == 0 {
		t.Fatalf("host %d: no VmRSS or Threads in /proc/%d/status", p.host.Index, p.cmd.Process.Pid)
	}
	return u
}

// admitted is what each host's rule admitted between two readings.
func admitted(before, after []hostCounts) []float64 {
	a := make([]float64, len(after))
	for i := range after {
		a[i] = float64(after[i].pass - before[i].pass)
	}
	return a
}

// floodAdmitted floods with s and returns what each host admitted, once
// every frame was judged (checkJudged).
func floodAdmitted(t *testing.T, l *fleetlab.Lab, s spread) ([]float64, spreadResult) {
	t.Helper()
	before := readCounts(t, l)
	res := floodSpread(t, l, s)
	after := settledCounts(t, l)
	checkJudged(t, before, after, res)
	return admitted(before, after), res
}

// checkJudged checks that the packet path judged every frame sent: a fault
// of the sync must never stall or bypass it.
func checkJudged(t *testing.T, before, after []hostCounts, res spreadResult) {
	t.Helper()
	for i := range after {
		judged := (after[i].pass - before[i].pass) + (after[i].drop - before[i].drop)
		if judged > res.Sent[i] || float64(judged) < 0.99*float64(res.Sent[i]) {
			t.Errorf("host %d: the rule judged %d of the %d frames sent", i, judged, res.Sent[i])
		}
	}
}

// leastLocal is the least a limit of burst + rate x t admits over res for
// hosts: the refill the floods' lapses longer than the bucket's memory
// (burst/rate) took out is not the limiter's to give (a sender held back
// on a loaded machine offers nothing), as checkFleetAdmits has it.
func leastLocal(t *testing.T, res spreadResult, hosts ...int) float64 {
	t.Helper()
	lost := res.lostRefill(hosts, time.Duration(tbBurst)*time.Second/tbRate)
	least := localWant(res) - tbRate*lost.Seconds()
	if lost > 0 {
		t.Logf("hosts %v: the floods lapsed %v beyond the bucket's memory: %.0f at the least", hosts, lost, least)
	}
	return least
}

// nearLeast is near with the lower end at least (lapses taken out).
func nearLeast(t *testing.T, what string, got, want, least, tol float64) {
	t.Helper()
	t.Logf("%s: %.0f, want %.0f ± %.0f%%, at least %.0f - %.0f%% (ratio %.4f)", what, got, want, tol*100, least, tol*100, got/want)
	if got > want*(1+tol) || got < least*(1-tol) {
		t.Errorf("%s: %.0f is not within %.0f%% of %.0f (%.0f at the least)", what, got, tol*100, want, least)
	}
}

// statusHas waits (2.5 s at most: the attach rewrites its status file
// every second) until host i's `xdplimit status` fleet line holds every one
// of want.
func statusHas(t *testing.T, l *fleetlab.Lab, i int, want ...string) {
	t.Helper()
	for deadline := time.Now().Add(2500 * time.Millisecond); ; time.Sleep(100 * time.Millisecond) {
		line := statusFleetLine(t, l.Host(i))
		missing := ""
		for _, w := range want {
			if !strings.Contains(line, w) {
				missing = w
				break
			}
		}
		if missing == "" {
			t.Logf("host %d: %s", i, line)
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("host %d: status %q lacks %q", i, line, missing)
			return
		}
	}
}
