// SPDX-License-Identifier: Apache-2.0

// What attach leaves behind when it ends: a foreign program it refuses to
// replace without --force, a killed attach whose limiter keeps enforcing and
// is adopted, and SIGTERM that keeps the limiter until detach.

package vm

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"

	"github.com/xdplimit/xdplimit/gen"
	"github.com/xdplimit/xdplimit/pktgen"
)

// A foreign XDP program is not replaced without --force; a refused or failed
// attach leaves it in place.
func TestForeignProgram(t *testing.T) {
	l := newLab(t, 1)
	spec, err := gen.LoadPktgen()
	if err != nil {
		t.Fatal(err)
	}
	var objs struct {
		Pass *ebpf.Program `ebpf:"xdpl_pass"`
	}
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		t.Fatal(err)
	}
	defer objs.Pass.Close()
	err = l.PeerNS.Do(func() error {
		nl, err := netlink.LinkByName(l.PeerName)
		if err != nil {
			return err
		}
		return netlink.LinkSetXdpFdWithFlags(nl, objs.Pass.FD(), 4 /* XDP_FLAGS_DRV_MODE */)
	})
	if err != nil {
		t.Fatal(err)
	}
	foreign := l.xdpAttached(t)
	path := writePolicy(t, "rules:\n  - name: r\n    limit: {algorithm: token_bucket, rate: 10/s, burst: 10}\n")
	out, err := l.run(t, "attach", l.PeerName, "--policy", path)
	if err == nil || !strings.Contains(out, "--force") {
		t.Fatalf("attach over a foreign program: err %v, output:\n%s", err, out)
	}
	if x := l.xdpAttached(t); x == nil || x.ProgId != foreign.ProgId {
		t.Fatalf("the foreign program was touched: now %+v", x)
	}
	p := l.start(t, "attach", l.PeerName, "--policy", path, "--force", "--detach-on-exit")
	p.waitAttached(t)
	if x := l.xdpAttached(t); x == nil || x.ProgId == foreign.ProgId {
		t.Fatalf("--force did not replace the foreign program: %+v", x)
	}
	if err := p.stop(t, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	l.requireClean(t)
}

// An attach killed mid-flood leaves the pinned limiter enforcing; a new
// attach adopts its state (counters and buckets) without a gap; detach then
// leaves nothing.
func TestKilledAttachKeepsEnforcingAndIsAdopted(t *testing.T) {
	l := newLab(t, 1)
	policy := "rules:\n  - name: r\n    match: {protocol: udp, src_cidrs: [198.18.0.1/32]}\n    limit: {algorithm: token_bucket, rate: 1000/s, burst: 100}\n"
	p := l.attach(t, policy)
	l.flood(t, l.udpFrame(18), pktgen.Sources{}, floodCount(200_000))
	if err := p.stop(t, syscall.SIGKILL); err == nil {
		t.Fatal("SIGKILL did not kill attach")
	}
	if l.xdpAttached(t) == nil {
		t.Fatal("the program went with the process")
	}
	pass1, drop1, _ := l.ruleCounts(t, "r")
	before := l.PeerNS.Snapshot(t)
	res := l.flood(t, l.udpFrame(18), pktgen.Sources{}, floodCount(1_000_000))
	stack := l.PeerNS.Snapshot(t).Delta(before).IPReceives()
	pass2, drop2, _ := l.ruleCounts(t, "r")
	if drop2-drop1 == 0 || float64(stack) > 100+1000*res.Elapsed.Seconds()*(1+accuracy())+100 {
		t.Errorf("not enforcing without its process: %d reached the stack, dropped %d more", stack, drop2-drop1)
	}
	checkStack(t, stack, pass2-pass1)

	p2 := l.attach(t, policy)
	p2.waitFor(t, "adopted=true", 5*time.Second)
	pass3, _, _ := l.ruleCounts(t, "r")
	if pass3 < pass2 {
		t.Errorf("adoption reset the counters: %d < %d", pass3, pass2)
	}
	if err := p2.stop(t, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	l.requireClean(t)
}

// SIGTERM leaves the limiter attached and enforcing, and says so;
// `xdplimit detach` removes it. --keep-on-exit, the old way to ask for
// this, is still accepted.
func TestExitKeepsThenDetach(t *testing.T) {
	l := newLab(t, 1)
	path := writePolicy(t, "rules:\n  - name: r\n    limit: {algorithm: token_bucket, rate: 1000/s, burst: 100}\n")
	p := l.start(t, "attach", l.PeerName, "--policy", path, "--keep-on-exit")
	p.waitAttached(t)
	if err := p.stop(t, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if l.xdpAttached(t) == nil {
		t.Fatal("SIGTERM detached")
	}
	if !strings.Contains(p.out.String(), "the limiter stays attached") {
		t.Errorf("the exit does not say the limiter stays:\n%s", p.out)
	}
	// A policy applied with no attach process running: a fleet: section
	// gets a warning that nothing will sync it (Redis is never contacted).
	fleetPolicy := writePolicy(t, "fleet:\n  redis: redis://127.0.0.1:1/0\n  namespace: t\nrules:\n"+
		"  - name: f\n    limit: {algorithm: token_bucket, rate: 1000/s, burst: 100, scope: fleet}\n")
	out, err := l.run(t, "reload", l.PeerName, "--policy", fleetPolicy)
	if err != nil || !strings.Contains(out, "policy "+fleetPolicy+" applied") ||
		!strings.Contains(out, "no attach process runs to sync the fleet: section") {
		t.Errorf("reload --policy with a fleet: section: %v\n%s", err, out)
	}
	// What an attach killed during a fleet sync leaves: detach removes it.
	stale := "/run/xdplimit/" + l.PeerName + ".fleet.json"
	if err := os.WriteFile(stale, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := l.run(t, "detach", l.PeerName); err != nil {
		t.Fatalf("detach: %v\n%s", err, out)
	}
	l.requireClean(t)
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("detach left the fleet status file %s (%v)", stale, err)
	}
	// The program is off the interface when detach returns: attaching
	// again at once must not find it there.
	p = l.attach(t, "rules:\n  - name: r\n    limit: {algorithm: token_bucket, rate: 1000/s, burst: 100}\n")
	if err := p.stop(t, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	l.requireClean(t)
}
