package vm

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/gen"
	"github.com/xdplimit/xdplimit/internal/testutil"
	"github.com/xdplimit/xdplimit/pktgen"
)

// accuracy is the admitted/expected tolerance: ±5% on the host. Time runs
// unevenly under emulation (the VM suite), where it is wider.
func accuracy() float64 {
	if os.Getenv("XDPLIMIT_VM") != "" {
		return 0.25
	}
	return 0.05
}

// checkAdmitted judges an admitted count against want, what the limit
// allows over the flood's wall-clock span, by how long the flood really
// ran. Over-admission is always a failure: nothing the machine does makes
// a limiter admit more than its limit over the span. Under-admission is
// one only against the time the flood's threads ran: the bursts here hold
// ≥ 100 ms of refill, so preemption in time slices loses nothing, but a
// sending thread kept off its CPU for longer (a loaded 2-core host) leaves
// the limiter nothing to admit, and what it could not admit then is not
// its error. busy is the threads' CPU time over their share of the span
// (the receiver's XDP runs in the sender's softirq and is charged to it;
// work deferred to ksoftirqd is not, which only lowers busy and widens the
// bound). Under emulation the guest counts the host's stalls of its vCPUs
// as running time, so no measure from inside can see them: there the lower
// tolerance stays accuracy()'s. threads is the number of sending threads
// (an unpinned one may show on several CPUs in res.PerCPU).
func checkAdmitted(t *testing.T, what string, got, want float64, res pktgen.Result, threads int) {
	t.Helper()
	busy := 1.0
	if res.Elapsed > 0 {
		busy = min(1, res.CPUTime.Seconds()/float64(threads)/res.Elapsed.Seconds())
	}
	tol := accuracy()
	lo, hi := want*(1-tol), want*(1+0.05)
	if os.Getenv("XDPLIMIT_VM") == "" {
		lo = want * busy * (1 - tol)
	}
	t.Logf("%s: %.0f, expected %.0f over the span (ratio %.4f); flood threads ran %.0f%% of it: accepted %.0f to %.0f",
		what, got, want, got/want, 100*busy, lo, hi)
	if got > hi {
		t.Errorf("%s: %.0f is over the limit: %.0f allowed over the flood's span, +5%%", what, got, want)
	}
	if got < lo {
		t.Errorf("%s: %.0f is under %.0f, what the limit allows over the %.0f%% of the span the flood ran, -%.0f%%",
			what, got, want*busy, 100*busy, 100*tol)
	}
}

// floodCount scales a flood to the machine: the VM's emulated CPUs send
// ~250 kpps, the host's ~10x that.
func floodCount(host uint64) uint64 {
	if os.Getenv("XDPLIMIT_VM") != "" {
		return host / 8
	}
	return host
}

// checkStack compares the packets that reached the receiver's IP stack with
// what xdplimit says it passed: they must agree to within background noise.
func checkStack(t *testing.T, stack, passed uint64) {
	t.Helper()
	if stack < passed || stack > passed+5 {
		t.Errorf("the receiver's stack got %d packets, xdplimit passed %d", stack, passed)
	}
}

// checkDelivered compares the packets xdplimit judged (for a rule that
// matches only the test's flow) with those the generator sent.
func checkDelivered(t *testing.T, judged, sent uint64) {
	t.Helper()
	// veth drops frames before any program sees them when its XDP ring is
	// full: under emulation often, on the host now and then (when the
	// receiver's NAPI was deferred to ksoftirqd: 1.6% and 2.4% of a flood
	// seen in repeated runs). What xdplimit did with the frames it saw is
	// checked exactly elsewhere (its counters against the stack's).
	least := sent - sent/10
	if os.Getenv("XDPLIMIT_VM") != "" {
		least = sent / 2
	}
	if judged > sent || judged < least {
		t.Errorf("xdplimit judged %d packets, the generator sent %d", judged, sent)
	}
}

func TestAttachEnforcesAndDetaches(t *testing.T) {
	l := newLab(t, 1)
	p := l.attach(t, `
rules:
  - name: udp
    match: {protocol: udp}
    limit: {algorithm: token_bucket, rate: 2000/s, burst: 1000}
`)
	if x := l.xdpAttached(t); x == nil || x.AttachMode != 1 {
		t.Fatalf("expected a native XDP program on %s, got %+v", l.PeerName, x)
	}
	before := l.PeerNS.Snapshot(t)
	res := l.flood(t, l.udpFrame(18), pktgen.Sources{}, floodCount(3_000_000))
	stack := l.PeerNS.Snapshot(t).Delta(before).IPReceives()
	pass, drop, _ := l.ruleCounts(t, "udp")
	t.Logf("sent %v; passed %d, dropped %d; stack received %d", res, pass, drop, stack)
	checkDelivered(t, pass+drop, res.Sent)
	checkStack(t, stack, pass)
	checkAdmitted(t, "admitted", float64(pass), 1000+2000*res.Elapsed.Seconds(), res, 1)

	if err := p.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("attach exited with %v:\n%s", err, p.out)
	}
	l.requireClean(t)
}

// One source spread over both receive queues (and so both CPUs) is held to
// the configured rate, not twice it.
func TestTwoQueuesOneSource(t *testing.T) {
	if runtime.NumCPU() < 2 {
		testutil.Require(t, false, "needs 2 CPUs")
	}
	l := newLab(t, 2)
	l.attach(t, `
rules:
  - name: udp
    limit: {algorithm: token_bucket, rate: 5000/s, burst: 2500}
`)
	res := l.flood(t, l.udpFrame(18), pktgen.Sources{}, floodCount(4_000_000), 0, 1)
	if len(res.PerCPU) < 2 {
		t.Fatalf("the flood did not use both CPUs: %v", res.PerCPU)
	}
	pass, drop, _ := l.ruleCounts(t, "udp")
	t.Logf("sent %v; passed %d, dropped %d", res, pass, drop)
	checkAdmitted(t, "admitted over two queues", float64(pass), 2500+5000*res.Elapsed.Seconds(), res, 2)
}

// Each algorithm's admitted count over a flood. Buckets get half a second
// of burst so that a flood preempted for a moment on a busy machine loses no
// refill; a limiter off by a factor still shows.
func TestAlgorithmsOnVeth(t *testing.T) {
	// Windows longer than the generator's gaps between calls (10-25 ms), so
	// every window the flood covers fills up. The flood starts and stops
	// between our clock readings, so each edge window may be filled or
	// untouched: the expectation is one window short of all the windows
	// the readings span, and is right to one window (2% over ~50: the
	// flood lasts 5 s, whatever the machine's rate).
	const window = int64(100 * time.Millisecond)
	for _, c := range []struct {
		name, limit string
		// admissions allowed for a flood between two CLOCK_MONOTONIC times
		want func(start, end int64) float64
	}{
		{"token_bucket", "{algorithm: token_bucket, rate: 10000/s, burst: 5000}",
			func(s, e int64) float64 { return 5000 + 10000*float64(e-s)/1e9 }},
		// A flood fills every window it touches, and the datapath's
		// windows are aligned on CLOCK_MONOTONIC: count them.
		{"fixed_window", "{algorithm: fixed_window, packets: 1000, window: 100ms}",
			func(s, e int64) float64 { return 1000 * float64(e/window-s/window) }},
		{"sliding_window", "{algorithm: sliding_window, packets: 1000, window: 100ms}",
			func(s, e int64) float64 { return 1000 * float64(e/window-s/window) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := newLab(t, 1)
			// Only the test's flow: background packets from the sender's
			// stack (IPv6 MLD, ND) must not enter the rule's counters.
			l.attach(t, "rules:\n  - name: r\n    match: {protocol: udp, src_cidrs: [198.18.0.1/32]}\n    limit: "+c.limit+"\n")
			before := l.PeerNS.Snapshot(t)
			rx0, tx0 := l.linkDrops(t)
			start := monotonic()
			res := l.floodFor(t, l.udpFrame(18), 5*time.Second, floodCount(4_000_000))
			end := monotonic()
			stack := l.PeerNS.Snapshot(t).Delta(before).IPReceives()
			rx1, tx1 := l.linkDrops(t)
			pass, drop, _ := l.ruleCounts(t, "r")
			t.Logf("sent %v; judged %d, passed %d; stack %d; link drops rx %d tx %d", res, pass+drop, pass, stack, rx1-rx0, tx1-tx0)
			checkStack(t, stack, pass)
			checkAdmitted(t, "admitted", float64(pass), c.want(start, end), res, 1)
		})
	}
}

func monotonic() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// Per-/64 keys: many IPv6 sources in one /64 share one bucket.
func TestIPv6PrefixKey(t *testing.T) {
	l := newLab(t, 1)
	l.attach(t, `
rules:
  - name: v6
    key: {ipv4_prefix: 32, ipv6_prefix: 64}
    limit: {algorithm: token_bucket, rate: 1000/s, burst: 500}
`)
	f := pktgen.Frame{SrcMAC: l.MAC, DstMAC: l.PeerMAC, Src: netip.MustParseAddr("2001:2::1:0"), Dst: l.PeerAddr6,
		SrcPort: 40000, DstPort: 9, Payload: 18}
	// 4096 sources differing in their low 32 bits: all in 2001:2::/64.
	res := l.flood(t, f.MustBuild(), pktgen.Sources{Mode: pktgen.Sequential, Count: 4096}, floodCount(1_000_000))
	pass, _, _ := l.ruleCounts(t, "v6")
	checkAdmitted(t, "admitted for one /64", float64(pass), 500+1000*res.Elapsed.Seconds(), res, 1)
}

// The allowed source also matches a rule that would drop nearly all of its
// flood: it passes whole only because the allow list decides first, and
// that rule counts nothing. The denied one matches a rule that would let
// it through.
func TestAllowDenyAndShadow(t *testing.T) {
	l := newLab(t, 1)
	l.attach(t, `
rules:
  - name: shadowed
    match: {src_cidrs: [198.18.0.0/24]}
    limit: {algorithm: token_bucket, rate: 100/s, burst: 10}
    action: shadow
  - name: limited
    match: {src_cidrs: [198.18.1.0/24]}
    limit: {algorithm: token_bucket, rate: 100/s, burst: 10}
  - name: open
    match: {src_cidrs: [198.18.2.0/24]}
    limit: {algorithm: token_bucket, rate: 1000000/s, burst: 1000000}
allow: [198.18.1.0/24]
deny: [198.18.2.0/24]
`)
	for _, c := range []struct {
		src       string
		wantStack bool
	}{
		{"198.18.1.7", true},  // allowed: never limited
		{"198.18.2.7", false}, // denied: all dropped
		{"198.18.0.7", true},  // shadow: counted as would-drop, passed
	} {
		before := l.PeerNS.Snapshot(t)
		f := pktgen.Frame{SrcMAC: l.MAC, DstMAC: l.PeerMAC, Src: netip.MustParseAddr(c.src), Dst: l.PeerAddr,
			SrcPort: 40000, DstPort: 9, Payload: 18}
		res := l.flood(t, f.MustBuild(), pktgen.Sources{}, 20000)
		stack := l.PeerNS.Snapshot(t).Delta(before).IPReceives()
		if c.wantStack {
			// Background packets (IPv6 MLD, ND) may add a few.
			t.Logf("%s: %d of %d reached the stack", c.src, stack, res.Sent)
			if stack > res.Sent+5 {
				t.Errorf("%s: %d reached the stack, more than the %d sent", c.src, stack, res.Sent)
			}
			checkDelivered(t, min(stack, res.Sent), res.Sent)
		}
		if !c.wantStack && stack > 5 {
			t.Errorf("%s: %d of %d reached the stack, want none", c.src, stack, res.Sent)
		}
		if c.src == "198.18.1.7" {
			if pass, drop, shadow := l.ruleCounts(t, "limited"); pass+drop+shadow != 0 {
				t.Errorf("an allowed source reached its rule: pass %d, drop %d, shadow %d", pass, drop, shadow)
			}
		}
		if c.src == "198.18.2.7" {
			if pass, drop, shadow := l.ruleCounts(t, "open"); pass+drop+shadow != 0 {
				t.Errorf("a denied source reached its rule: pass %d, drop %d, shadow %d", pass, drop, shadow)
			}
		}
		if c.src == "198.18.0.7" {
			pass, drop, shadow := l.ruleCounts(t, "shadowed")
			checkDelivered(t, pass+shadow, res.Sent)
			// Burst 10 at 100/s: all but a few are would-drops.
			if drop != 0 || shadow < (pass+shadow)*9/10 {
				t.Errorf("shadow rule: pass %d, drop %d, shadow %d", pass, drop, shadow)
			}
		}
	}
}

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
	p.waitFor(t, "attached", 30*time.Second)
	if x := l.xdpAttached(t); x == nil || x.ProgId == foreign.ProgId {
		t.Fatalf("--force did not replace the foreign program: %+v", x)
	}
	if err := p.stop(t, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	l.requireClean(t)
}

// --mode generic attaches in generic (skb) mode and enforces there: a
// plain UDP send from the sender's stack is limited, and what the rule
// passes is what reaches the receiver's stack. The live-frames generator
// cannot feed it: its XDP_TX frames reach a veth peer only through a native
// program, and a native and a generic program cannot share an interface.
func TestGenericMode(t *testing.T) {
	l := newLab(t, 1)
	const burst, rate = 100, 1000
	p := l.attach(t, fmt.Sprintf("rules:\n  - name: r\n    match: {protocol: udp, src_cidrs: [%s/32], dst_ports: [9]}\n"+
		"    limit: {algorithm: token_bucket, rate: %d/s, burst: %d}\n", l.Addr, rate, burst), "--mode", "generic")
	if x := l.xdpAttached(t); x == nil || x.AttachMode != 2 {
		t.Fatalf("want a generic-mode program, got %+v", x)
	}
	out, err := l.run(t, "status", l.PeerName)
	if err != nil || !strings.Contains(out, "attached (generic)") {
		t.Fatalf("status: %v\n%s", err, out)
	}
	before := l.PeerNS.Snapshot(t)
	start := time.Now()
	sent := l.sendUDP(t, 4000)
	l.settle(t)
	elapsed := time.Since(start)
	stack := l.PeerNS.Snapshot(t).Delta(before).IPReceives()
	pass, drop, _ := l.ruleCounts(t, "r")
	t.Logf("sent %d datagrams in %v; passed %d, dropped %d; stack received %d", sent, elapsed, pass, drop, stack)
	checkDelivered(t, pass+drop, sent)
	checkStack(t, stack, pass)
	// The bucket starts full and the send outruns it: the burst passes, and
	// at most the refill over the whole measured span (the send and the
	// wait for the stack) on top; everything else is dropped.
	if most := burst + uint64(rate*elapsed.Seconds()) + 1; pass < burst || pass > most {
		t.Errorf("generic mode passed %d of %d: want %d to %d", pass, sent, burst, most)
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
	p.waitFor(t, "attached", 30*time.Second)
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

// SIGHUP under a flood: a rule whose limit is unchanged keeps its state, one
// whose limit changed starts from its new parameters, and an invalid file
// changes nothing.
func TestReloadUnderFlood(t *testing.T) {
	l := newLab(t, 1)
	path := writePolicy(t, `
rules:
  - name: a
    match: {src_cidrs: [198.18.0.1/32]}
    limit: {algorithm: token_bucket, rate: 10/s, burst: 100}
`)
	p := l.start(t, "attach", l.PeerName, "--policy", path)
	p.waitFor(t, "attached", 30*time.Second)
	res := l.flood(t, l.udpFrame(18), pktgen.Sources{}, floodCount(1_000_000))
	passA, _, _ := l.ruleCounts(t, "a")
	t.Logf("before reload: %v, passed %d", res, passA)

	// Invalid: reported, the old policy stays.
	if err := os.WriteFile(path, []byte("rules: [ {name: a, limit: {algorithm: token_bucket, rate: 10/sec}} ]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Process.Signal(syscall.SIGHUP)
	p.waitFor(t, "reload failed", 10*time.Second)

	// Valid: a keeps its limit (and its bucket), b is new.
	if err := os.WriteFile(path, []byte(`
rules:
  - name: a
    match: {src_cidrs: [198.18.0.1/32]}
    limit: {algorithm: token_bucket, rate: 10/s, burst: 100}
  - name: b
    match: {src_cidrs: [198.18.0.9/32]}
    limit: {algorithm: token_bucket, rate: 50000/s, burst: 5000}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Process.Signal(syscall.SIGHUP)
	p.waitFor(t, "reloaded", 10*time.Second)
	// The bucket of a is empty after the flood and refills 10 a second:
	// kept state admits a handful, a reset bucket its full burst of 100.
	l.flood(t, l.udpFrame(18), pktgen.Sources{}, 150)
	passA2, _, _ := l.ruleCounts(t, "a")
	if passA2-passA > 30 {
		t.Errorf("rule a admitted %d of 150 right after the reload: its bucket was reset", passA2-passA)
	}
	// b is in force: another source passes under it.
	f := pktgen.Frame{SrcMAC: l.MAC, DstMAC: l.PeerMAC, Src: netip.MustParseAddr("198.18.0.9"), Dst: l.PeerAddr,
		SrcPort: 40000, DstPort: 9, Payload: 18}
	// Compared with what was sent: the generator may send a few more
	// than asked (it repeats an interrupted call whole).
	resB := l.flood(t, f.MustBuild(), pktgen.Sources{}, 1000)
	passB, dropB, _ := l.ruleCounts(t, "b")
	checkDelivered(t, passB, resB.Sent)
	if dropB != 0 {
		t.Errorf("rule b (5000 burst) dropped %d of %d", dropB, resB.Sent)
	}
	// A changed limit starts from its new parameters: a fresh burst.
	if err := os.WriteFile(path, []byte(`
rules:
  - name: a
    match: {src_cidrs: [198.18.0.1/32]}
    limit: {algorithm: token_bucket, rate: 10/s, burst: 300}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Process.Signal(syscall.SIGHUP)
	p.waitFor(t, "reloaded", 10*time.Second) // the first "reloaded" is already there; poll the effect
	deadline := time.Now().Add(10 * time.Second)
	for {
		before, _, _ := l.ruleCounts(t, "a")
		l.flood(t, l.udpFrame(18), pktgen.Sources{}, 400)
		after, _, _ := l.ruleCounts(t, "a")
		if after-before >= 290 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after changing a's burst to 300, it admits %d of 400", after-before)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func writePolicy(t *testing.T, s string) string {
	t.Helper()
	path := t.TempDir() + "/policy.yaml"
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
