// SPDX-License-Identifier: Apache-2.0

package fleet

// Reloads under a fleet policy: a reload that changes
// the fleet: section or a level's scope keeps every level's state.

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testkit/fleetlab"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
)

// 5. Reloads that change fleet: (sync, namespace) or a level's scope keep
// every level's state: a source and a global key that used up their
// buckets stay refused right after each reload, instead of getting a
// fresh burst.
func TestFleetFaultReloadKeepsState(t *testing.T) {
	testutil.RequireRedis(t)
	l := fleetlab.NewLab(t, 1)
	l.StartRedis(t, "")
	// A slow refill and a burst far above it: a reset bucket admits a
	// burst of 100 at once, a kept one only what 10/s refilled.
	const rate, burst = 10, 100
	policy := fleetYAML(faultSync.String(), false, redisURL(l)) + `rules:
  - name: src
    match: {protocol: udp, dst_ports: [9]}
    limit: {algorithm: token_bucket, rate: 10/s, burst: 100, scope: fleet}
  - name: all
    match: {protocol: udp, dst_ports: [10]}
    key: global
    limit: {algorithm: token_bucket, rate: 10/s, burst: 100, scope: fleet}
`
	f := startFleet(t, l, policy, fleetOptions{WaitUp: true})
	rules := map[string]uint16{"src": 9, "all": 10}
	// Use up both buckets: 500 frames each, far above the burst. Each
	// bucket is empty when the frames sent at it end: what it admits
	// later is what refilled since then.
	emptied := map[string]time.Time{}
	for rule, port := range rules {
		floodSpread(t, l, spread{Hosts: []int{0}, Rate: 2000, Dur: 250 * time.Millisecond, Src: src(1), DstPort: port})
		emptied[rule] = time.Now()
	}

	edits := []struct{ what, old, new string }{
		{"fleet sync 100ms -> 200ms", "sync: 100ms", "sync: 200ms"},
		{"fleet namespace", "namespace: e2e-", "namespace: e2e-reloaded-"},
		{"scope fleet -> host", "scope: fleet", "scope: host"},
		{"scope host -> fleet", "scope: host", "scope: fleet"},
	}
	for _, e := range edits {
		if !strings.Contains(policy, e.old) {
			t.Fatalf("%s: no %q in the policy:\n%s", e.what, e.old, policy)
		}
		policy = strings.ReplaceAll(policy, e.old, e.new)
		f.reload(t, policy)
		for rule, port := range rules {
			got := probe(t, l, rule, port)
			// What the bucket refilled since it was last used up, until
			// the probe ended, and a few for the sync's rounding.
			refill := rate*time.Since(emptied[rule]).Seconds() + 5
			emptied[rule] = time.Now()
			t.Logf("after %s: rule %s admitted %d of %d (refilled since last emptied: %.0f)", e.what, rule, got, probeCount, refill)
			if float64(got) > refill {
				t.Errorf("after %s: rule %s admitted %d at once, want at most %.0f: its bucket (burst %d) was reset",
					e.what, rule, got, refill, burst)
			}
		}
	}

	// The control: a changed limit is a new level with fresh buckets,
	// and the same probe sees their burst.
	policy = strings.ReplaceAll(policy, "burst: 100,", "burst: 101,")
	f.reload(t, policy)
	for rule, port := range rules {
		got := probe(t, l, rule, port)
		t.Logf("after a new burst: rule %s admitted %d of %d", rule, got, probeCount)
		if got < burst {
			t.Errorf("after a new burst (a new level): rule %s admitted %d, want its whole burst", rule, got)
		}
	}
}

const probeCount = 300

// probe sends probeCount frames to host 0's rule at once and returns how
// many it admitted, checking that it judged them all.
func probe(t *testing.T, l *fleetlab.Lab, rule string, port uint16) uint64 {
	t.Helper()
	h := l.Host(0)
	pass0, drop0 := ruleCounts(t, h, rule)
	floodSpread(t, l, spread{Hosts: []int{0}, Rate: 4000, Dur: probeCount * time.Second / 4000, Src: src(1), DstPort: port})
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		pass1, drop1 := ruleCounts(t, h, rule)
		if judged := pass1 + drop1 - pass0 - drop0; judged >= probeCount {
			return pass1 - pass0
		} else if time.Now().After(deadline) {
			t.Fatalf("rule %s judged %d of the %d frames of a probe", rule, judged, probeCount)
		}
	}
}

// reload writes policy over host 0's policy file, as editors save (a new
// file renamed over the old), sends SIGHUP, and waits until it is reloaded
// (msg=reloaded: the namespace an edit gives the fleet says "reloaded" too).
func (f *fleetRun) reload(t *testing.T, policy string) {
	t.Helper()
	reloads := f.lines(0, "msg=reloaded")
	tmp := filepath.Join(filepath.Dir(f.policy), ".policy.tmp")
	if err := os.WriteFile(tmp, []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, f.policy); err != nil {
		t.Fatal(err)
	}
	if err := f.proc(0).cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	f.waitLines(t, 0, reloads+1, "msg=reloaded", 10*time.Second)
	if f.lines(0, "reload failed") != 0 {
		t.Fatalf("a reload failed:\n%s", f.proc(0).output())
	}
}
