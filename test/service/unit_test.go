// SPDX-License-Identifier: Apache-2.0

package service

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/loader"
	"github.com/xdplimit/xdplimit/metrics"
)

// TestUnitInstances: instances of the unit on two interfaces start side by
// side, and one scrape of the default metrics address shows both, with
// /healthz a line for each; a third, for an interface that does not exist
// yet, waits for it and joins as it appears. The unit's ExecReload fails
// with the file:line:col error on a broken policy, which leaves the old one
// in force, and succeeds on a good one. When the instance holding the
// metrics address stops, another takes it over.
func TestUnitInstances(t *testing.T) {
	testutil.RequireRoot(t)
	bin := testutil.XdplimitBin(t)
	id := testutil.UniqueID(t, "xua", "xub", "xuc", "xud", "xue", "xuf")
	a := testutil.NewVethPair(t, testutil.VethConfig{Name: "xua" + id, PeerName: "xub" + id})
	b := testutil.NewVeth(t, a.NS, a.PeerNS, testutil.VethConfig{Name: "xuc" + id, PeerName: "xud" + id,
		Addr: prefix("198.18.1.1/24"), PeerAddr: prefix("198.18.1.2/24"),
		Addr6: prefix("2001:2:0:1::1/64"), PeerAddr6: prefix("2001:2:0:1::2/64")})
	late := "xue" + id
	ifaces := []string{a.PeerName, b.PeerName, late}
	cleanPins(t, ifaces...)
	etc := t.TempDir()
	policy := "rules:\n  - name: udp\n    match: {protocol: udp}\n    limit: {algorithm: token_bucket, rate: 1000/s, burst: 1000}\n"
	for _, iface := range ifaces {
		writePolicy(t, etc, iface, policy)
	}

	// Started together, as at boot: both bind, or find the holder.
	procs := map[string]*instance{}
	for _, iface := range ifaces[:2] {
		procs[iface] = start(t, a.PeerNS, unitLine(t, "ExecStart", iface, bin, etc))
	}
	for _, iface := range ifaces[:2] {
		procs[iface].waitFor(t, "msg=attached", testutil.MachineWait)
	}
	const addr = "http://" + metrics.DefaultAddr
	scraped := func(want ...string) bool { return scrapedUp(t, a.PeerNS, addr, want...) }
	if !eventually(10*time.Second, func() bool { return scraped(ifaces[:2]...) }) {
		_, body := get(t, a.PeerNS, addr+"/metrics")
		t.Fatalf("one scrape does not show both interfaces:\n%s", body)
	}
	healthz := func() string { _, body := get(t, a.PeerNS, addr+"/healthz"); return body }
	if got, want := healthz(), fmt.Sprintf("ok\n%s: ok\n%s: ok\n", a.PeerName, b.PeerName); got != want {
		t.Errorf("/healthz %q, want %q", got, want)
	}

	// ExecReload: a broken policy fails, with its position; the old one stays.
	checkExecReload(t, unitLine(t, "ExecReload", a.PeerName, bin, etc), etc, a.PeerName, policy)

	// An interface that appears after its instance started.
	procs[late] = start(t, a.PeerNS, unitLine(t, "ExecStart", late, bin, etc))
	procs[late].waitFor(t, "waiting for the interface to appear", 30*time.Second)
	if body := healthz(); !strings.Contains(body, late+": waiting for the interface to appear") {
		t.Errorf("/healthz while %s is missing:\n%s", late, body)
	}
	testutil.NewVeth(t, a.NS, a.PeerNS, testutil.VethConfig{Name: "xuf" + id, PeerName: late,
		Addr: prefix("198.18.2.1/24"), PeerAddr: prefix("198.18.2.2/24"),
		Addr6: prefix("2001:2:0:2::1/64"), PeerAddr6: prefix("2001:2:0:2::2/64")})
	procs[late].waitFor(t, "msg=attached", testutil.MachineWait)
	if !eventually(10*time.Second, func() bool { return scraped(ifaces...) }) {
		t.Errorf("the late interface is not scraped")
	}

	// The holder stops: another instance serves the address, and the
	// stopped one's limiter goes on enforcing (not scraped: no process).
	checkHandover(t, procs, ifaces, scraped)
}

// scrapedUp: one scrape of addr from ns shows each interface of want up.
func scrapedUp(t *testing.T, ns *testutil.Netns, addr string, want ...string) bool {
	code, body := get(t, ns, addr+"/metrics")
	for _, iface := range want {
		if code != 200 || !strings.Contains(body, fmt.Sprintf(`xdplimit_up{interface=%q} 1`, iface)) {
			return false
		}
	}
	return true
}

// checkExecReload runs the unit's ExecReload for iface, whose policy in
// etc is policy: on a broken policy it fails with the error's position
// and the old policy stays; on a good one it reloads.
func checkExecReload(t *testing.T, reload []string, etc, iface, policy string) {
	path := writePolicy(t, etc, iface, "rules:\n  - name: udp\n    limit: {rate: 1000/sec}\n")
	out, err := run(t, reload...)
	want := path + ":3:12: rules[0].limit: algorithm is required"
	if err == nil || !strings.Contains(out, want) {
		t.Errorf("ExecReload of a broken policy: %v, output %q; want a failure with %q", err, out, want)
	}
	s, err := loader.Open(iface)
	must(t, err)
	stats, err := s.Limiter.RuleStats()
	s.Close()
	must(t, err)
	if len(stats) != 1 || stats[0].Name != "udp" {
		t.Errorf("after a refused reload: rules %+v, want the previous policy's", stats)
	}
	writePolicy(t, etc, iface, strings.ReplaceAll(policy, "1000/s", "2000/s"))
	if out, err := run(t, reload...); err != nil || !strings.Contains(out, "reloaded") {
		t.Errorf("ExecReload of a good policy: %v\n%s", err, out)
	}
}

// checkHandover stops the instance that serves the metrics address: one of
// the others must take the address over, and the stopped one's limiter
// stays attached.
func checkHandover(t *testing.T, procs map[string]*instance, ifaces []string, scraped func(...string) bool) {
	holder := ""
	for _, iface := range ifaces {
		if strings.Contains(procs[iface].out.String(), "serving metrics for every attach process") {
			holder = iface
		}
	}
	if holder == "" {
		t.Fatal("no instance says it serves the metrics address")
	}
	if err := procs[holder].stop(t); err != nil {
		t.Fatalf("stopping %s: %v", holder, err)
	}
	var rest []string
	for _, iface := range ifaces {
		if iface != holder {
			rest = append(rest, iface)
		}
	}
	if !eventually(15*time.Second, func() bool { return scraped(rest...) }) {
		t.Errorf("no instance took the metrics address over from %s", holder)
	}
	if _, err := loader.Open(holder); err != nil {
		t.Errorf("the stopped instance's limiter: %v", err)
	}
}
