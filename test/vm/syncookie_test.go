// SPDX-License-Identifier: Apache-2.0

package vm

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

// SYN cookies end to end (docs/policy.md "SYN cookies"): a listener behind
// the limiter, a flood of forged SYNs, and a real client (the kernel's TCP,
// through Go's net.Dial) that must get through. The lab is cookielab_test.go; the TCP ends cookieconn_test.go.

// connectLimit is the target for a client under the flood: a
// connection within 1.5 s, the kernel's first SYN retransmit (1 s)
// included.
const connectLimit = 1500 * time.Millisecond

// floodPolicy is today's defence against a SYN flood, per source and
// global, with the action under test.
func floodPolicy(action string) string {
	return cookiePolicy("{algorithm: token_bucket, rate: 2000/s, burst: 2000}", action)
}

// floodRun is one configuration's run: the client's dials under the flood
// and what the limiter and the listener counted meanwhile.
type floodRun struct {
	name      string
	flood     pktgen.Result
	arrived   uint64 // of the flood, at the listener's end (the rest its full ring dropped)
	outlasted bool   // the flood was still running when the client finished
	dials     dialStats
	retrans   uint64 // SYNs the client sent again (TcpExtTCPSynRetrans)
	rule      verdicts
	stack     tcpExt
}

func (r floodRun) String() string {
	return fmt.Sprintf("%s; %d SYNs sent again; flood %v, %d reached the listener's end", r.dials, r.retrans, r.flood, r.arrived)
}

// underFlood floods the cookie port from forged sources, waits until
// arriving (what the receiver counts of the flood) has moved by 1000, runs
// n client connections, workers at a time, each with the dial timeout
// given, then stops the flood.
func (cl *cookieLab) underFlood(t *testing.T, name string, n, workers int, timeout time.Duration,
	limiter bool, arriving func() uint64) floodRun {
	t.Helper()
	r := floodRun{name: name}
	var v0 verdicts
	if limiter {
		v0 = cl.verdicts(t)
	}
	x0 := cl.tcpExt(t)
	retrans0 := cl.C.Snapshot(t).Raw["TcpExt.TCPSynRetrans"]
	drops0, _ := cl.ringDrops(t)
	start := arriving()
	// The client's run ends inside the flood's own bound, with room
	// for the flood to be stopped before the generator's timeout.
	until := time.Now().Add(floodTimeout - 30*time.Second)
	f := cl.startFlood(t, cl.segment(cookiePort, pktgen.TCPSyn, 0), forgedSources, floodBound)
	cl.waitArriving(t, name, f, arriving, start, drops0)
	res := cl.dialAll(n, workers, cookiePort, timeout, until)
	r.flood, r.outlasted = f.stop(t)
	cl.settle(t)
	drops1, _ := cl.ringDrops(t)
	r.arrived = r.flood.Sent - min(r.flood.Sent, drops1-drops0)
	r.dials = summarize(res, connectLimit)
	r.retrans = cl.C.Snapshot(t).Raw["TcpExt.TCPSynRetrans"] - retrans0
	r.stack = cl.tcpExt(t).minus(x0)
	if limiter {
		r.rule = cl.verdicts(t).minus(v0)
	}
	t.Logf("%s: %v", name, r)
	t.Logf("%s: %v", name, r.stack)
	if limiter {
		t.Logf("%s: %v", name, r.rule)
	}
	if !r.outlasted {
		t.Errorf("%s: the flood ended before the client did (bound %d frames): the run is not one under a flood", name, floodBound)
	}
	return r
}

// waitArriving waits until arriving has moved by 1000 from start, and
// fails saying where the flood went when it does not: ended (with the
// generator's error), or turned away by the listener's ring.
func (cl *cookieLab) waitArriving(t *testing.T, name string, f *bgFlood, arriving func() uint64, start, drops0 uint64) {
	t.Helper()
	const limit = time.Minute
	for deadline := time.Now().Add(limit); arriving() < start+1000; time.Sleep(20 * time.Millisecond) {
		if f.ended() {
			t.Fatalf("%s: the flood ended before 1000 of its frames reached the listener's end (%d did): sent %v, error %v",
				name, arriving()-start, f.res, f.err)
		}
		if time.Now().After(deadline) {
			drops, _ := cl.ringDrops(t)
			t.Fatalf("%s: after %v, %d of the flood's frames had reached the listener's end, and its ring had turned away %d",
				name, limit, arriving()-start, drops-drops0)
		}
	}
}

// A client opens 1000 connections during the flood and exchanges data on
// each. With action syncookie every exchange completes, and the flood's
// SYNs never reach the stack: the listener's accept queue never overflows
// and it sent no more cookies of its own than the rule admitted (the global
// level's share, and one SYN a second to keep its listeners accepting
// cookie ACKs).
//
// At least 99% connect within 1.5 s, and every exchange completes, under
// a flood the receiver absorbs: the generator paced to a quarter of what
// the listener's end took in at full rate (room for the machine's load to
// change between the two runs; still several times the rule's pass levels,
// so that the rule answers most of it). At the generator's full rate both
// are reported, not asserted: here the generator and the answers share
// two CPUs, the veth's ring overflows (about 70% of the flood dropped
// before any XDP program sees it), and the client's segments are dropped
// there at random with the flood's frames, whatever the program does.
//
// Beside them, reported and not asserted, the same client against today's
// defence (the same limits, action drop: the client's SYNs are refused as
// the flood's are, but for the tokens that pile up while the generator
// pauses for the client, TRAPS.md) and against the kernel's own cookies
// without XDP.
func TestSynCookieFlood(t *testing.T) {
	cl := newCookieLab(t)
	p := cl.attachPolicy(t, floodPolicy("syncookie"))

	// Every verdict counts: what the rule passes as well as what it answers.
	judged := func() uint64 { v := cl.verdicts(t); return v.pass + v.cookie + v.drop }
	answeredByStack := func() uint64 { return cl.tcpExt(t).sent }

	full := cl.cookieRun(t, "syncookie, full rate", judged)
	absorbed := float64(full.arrived) / full.flood.Elapsed.Seconds()
	// Paced at a quarter of what the receiver absorbed, with a global
	// limit of 100/s: cookies answer the paced flood however slow the
	// machine. A limit the paced flood stayed under (2000/s, on a loaded
	// 6.1 VM's 1,078/s) handed every SYN to the kernel's own cookies,
	// which cost the receiver so much more that the paced flood then
	// overflowed its ring (the arm64 VM: 75%).
	cl.reload(t, cookiePolicy("{algorithm: token_bucket, rate: 100/s, burst: 100}", "syncookie"))
	if err := cl.gen.SetRate(absorbed / 4); err != nil {
		t.Fatal(err)
	}
	paced := cl.cookieRun(t, "syncookie, paced", judged)
	if err := cl.gen.SetRate(0); err != nil {
		t.Fatal(err)
	}
	if paced.dials.exchFailed > 0 {
		t.Errorf("syncookie, paced: %d exchanges on connected connections failed", paced.dials.exchFailed)
	}
	if paced.dials.cut*100 > paced.dials.n {
		t.Errorf("syncookie, paced: the client's run ended during %d of %d exchanges, want at most 1%%", paced.dials.cut, paced.dials.n)
	}
	if paced.dials.within*100 < 99*paced.dials.n {
		t.Errorf("syncookie, paced: %d of %d connected within %v, want at least 99%%; %.1f%% of the flood overflowed the ring",
			paced.dials.within, paced.dials.n, connectLimit, 100-100*float64(paced.arrived)/float64(max(paced.flood.Sent, 1)))
	}
	met := "met"
	if full.dials.within*100 < 99*full.dials.n {
		met = "NOT MET here"
	}
	t.Logf("syncookie at the generator's full rate: %d of %d connected within %v, target 99%%: %s; %d exchanges on connected connections failed (%.0f%% of the flood overflowed the ring before XDP)",
		full.dials.within, full.dials.n, connectLimit, met, full.dials.exchFailed, 100-100*float64(full.arrived)/float64(max(full.flood.Sent, 1)))

	cl.reload(t, floodPolicy("drop"))
	b := cl.underFlood(t, "drop", 200, 40, connectLimit, true, judged)

	// The kernel alone. A live frame reaches the listener's end only
	// through an XDP program there (TRAPS.md): a pass program, the
	// cheapest, with the limiter gone.
	if err := p.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("attach exited with %v:\n%s", err, p.out)
	}
	cl.requireClean(t)
	pass, err := pktgen.AttachSink(cl.PeerNS.Path(), cl.PeerName, pktgen.SinkPass)
	if err != nil {
		t.Fatal(err)
	}
	defer pass.Close()
	c := cl.underFlood(t, "no XDP, kernel cookies", 200, 40, connectLimit, false, answeredByStack)

	// The floods' rates differ: the receiver's work runs in the
	// generator's softirq, on the same two CPUs, and slows it down.
	t.Logf("side by side %s, a client under a flood of forged SYNs from the generator at its full rate (but the paced run):", where())
	for _, r := range []floodRun{full, paced, b, c} {
		t.Logf("  %-24s %5.1f%% connected within %v (%d of %d), dial median %s, p99 %s; flood %.0f SYNs/s, %.0f%% of them reached the listener's end",
			r.name, 100*float64(r.dials.within)/float64(r.dials.n), connectLimit, r.dials.within, r.dials.n,
			fmtDial(r.dials.median), fmtDial(r.dials.p99), r.flood.PPS(), 100*float64(r.arrived)/float64(max(r.flood.Sent, 1)))
	}
}

// cookieRun is a client's 1000 dials under a flood answered with cookies,
// and the checks that hold whatever share of the flood the ring dropped:
// the listener accepted every connection the client made and no other,
// its accept queue never overflowed, and the flood's SYNs the rule
// answered never reached its stack. Whether every exchange completes is
// the caller's to judge: the ring drops the client's data segments with
// the flood's frames, and where it drops most of them a retransmitted
// segment can miss the connection's one-minute deadline.
func (cl *cookieLab) cookieRun(t *testing.T, name string, judged func() uint64) floodRun {
	t.Helper()
	accepted0 := cl.srv.accepted()
	client0 := cl.C.Snapshot(t)
	port := fmt.Sprintf("tcp port %d", cookiePort)
	atClient := startCapture(t, cl.C, "the client's end", cl.client.Name, port)
	atListener := startCapture(t, cl.PeerNS, "the listener's end", cl.PeerName,
		fmt.Sprintf("host %v and %s", clientNet.Addr(), port))
	r := cl.underFlood(t, name, 1000, 8, 3*time.Second+500*time.Millisecond, true, judged)
	// Every connection whose echo came back was accepted. One whose
	// exchange failed may never have reached the listener: the client
	// counts itself connected on the SYN-ACK, and the ring can drop its
	// ACK and every retransmission of its data with the flood's frames.
	// It may accept a few more than the client made: an ACK of a SYN-ACK
	// answering a retransmitted SYN that arrives after its connection
	// closed carries a cookie still valid, and opens it again (the
	// client resets it); the kernel's own cookies do the same.
	accepted := cl.srv.accepted()
	echoed := r.dials.echoed()
	if got := accepted[clientNet.Addr()] - accepted0[clientNet.Addr()]; got < echoed {
		t.Errorf("%s: the listener accepted %d connections from the client, which had %d echoed back", name, got, echoed)
	} else if got != r.dials.connected {
		t.Logf("%s: the listener accepted %d connections from the client, which connected %d times (%d echoed back)", name, got, r.dials.connected, echoed)
	}
	for _, f := range r.dials.failed {
		t.Logf("%s: the exchange from %v failed (%v): the client's socket: %s; %s", name, f.local, f.exch, f.view, cl.srv.connOf(f.local))
		conn := fmt.Sprintf("tcp port %d", f.local.Port())
		t.Logf("%s: %s\n%s", name, atClient.show(conn), atListener.show(conn))
	}
	if len(r.dials.failed) > 0 {
		t.Logf("%s: the client's stack counted:%s", name, changedCounters(client0, cl.C.Snapshot(t)))
	}
	atClient.stop()
	atListener.stop()
	for from, n := range accepted {
		if from != clientNet.Addr() && n != accepted0[from] {
			t.Errorf("%s: the listener accepted %d connections from %v", name, n-accepted0[from], from)
		}
	}
	if r.stack.overflows != 0 {
		t.Errorf("%s: the listener's accept queue overflowed %d times (TcpExtListenOverflows)", name, r.stack.overflows)
	}
	if r.stack.sent > r.rule.pass {
		t.Errorf("%s: the listener sent %d cookies of its own, more than the %d SYNs the rule admitted: "+
			"SYNs the rule answered reached the stack", name, r.stack.sent, r.rule.pass)
	}
	if r.rule.cookie == 0 {
		t.Errorf("%s: the rule answered none of the %d SYNs that arrived", name, r.arrived)
	}
	return r
}

func where() string {
	if testutil.InVM() {
		return "in the VM (emulated CPUs)"
	}
	return "on the host"
}

// What a cookie rule does with segments other than a client's SYN, each
// sent from F with the generator, checked against the limiter's counters,
// the listener's and what came back to F (docs/policy.md "SYN cookies"):
// forged ACKs never open a connection, a SYN with payload is answered, a
// SYN+FIN is not, and SYNs to a port the rule does not match go to the
// stack. The rule answers every SYN to its port but the first and the
// keepalives. Each check is exact about the frames that reached the
// limiter: those sent less those the listener's full veth ring dropped.
func TestSynCookieForgedAndOddSegments(t *testing.T) {
	cl := newCookieLab(t)
	cl.attachPolicy(t, tightPolicy)
	const n = 500
	send := func(frame []byte, src pktgen.Sources) oddOutcome { return cl.sendOdd(t, frame, src, n) }

	t.Run("forged ACKs", func(t *testing.T) {
		r := send(cl.segment(cookiePort, pktgen.TCPAck, 0), forgedSources)
		arrived, v, x, accepted := r.arrived, r.v, r.x, r.accepted
		t.Logf("%d of %d arrived; %v; %v; %d connections accepted", arrived, n, v, x, accepted)
		if v.ackInvalid != arrived || v.ackValid != 0 {
			t.Errorf("of %d forged ACKs, %d were counted with an invalid cookie and %d with a valid one", arrived, v.ackInvalid, v.ackValid)
		}
		if accepted != 0 || x.passiveOpens != 0 || x.recv != 0 || x.failed != 0 {
			t.Errorf("forged ACKs reached the listener: %d connections accepted; %v", accepted, x)
		}
	})
	t.Run("SYN with payload", func(t *testing.T) {
		r := send(cl.segment(cookiePort, pktgen.TCPSyn, 100), forgedSource)
		arrived, v, x, sink := r.arrived, r.v, r.x, r.sink
		t.Logf("%d of %d arrived; %v; %v; %d frames came back to the source", arrived, n, v, x, sink)
		// The first SYN of the test is under the limit; then one a
		// second to the listener.
		if v.pass+v.cookie != arrived || v.drop != 0 || v.pass > v.keepalive+1 {
			t.Errorf("of %d SYNs with payload, %d answered, %d passed, %d dropped", arrived, v.cookie, v.pass, v.drop)
		}
		if sink < v.cookie {
			t.Errorf("%d SYN-ACKs came back for the %d SYNs answered", sink, v.cookie)
		}
		if x.sent > v.pass {
			t.Errorf("the listener answered %d SYNs itself, the rule passed %d", x.sent, v.pass)
		}
	})
	t.Run("SYN+FIN", func(t *testing.T) {
		r := send(cl.segment(cookiePort, pktgen.TCPSyn|pktgen.TCPFin, 0), forgedSource)
		arrived, v, sink := r.arrived, r.v, r.sink
		t.Logf("%d of %d arrived; %v; %d frames came back to the source", arrived, n, v, sink)
		if v.cookie != 0 || v.unanswered != v.drop || v.pass != v.keepalive || v.drop+v.pass != arrived {
			t.Errorf("of %d SYN+FINs: %v; want all dropped unanswered but the keepalives", arrived, v)
		}
		// The listener discards the keepalives: nothing comes back.
		if sink != 0 {
			t.Errorf("%d frames came back for SYN+FINs", sink)
		}
	})
	t.Run("SYN to a port the rule does not match", func(t *testing.T) {
		r := send(cl.segment(closedPort, pktgen.TCPSyn, 0), forgedSource)
		t.Logf("%d of %d arrived; %v; %d unmatched; the listener's stack took in %d TCP segments and %d IPv6 packets",
			r.arrived, n, r.v, r.unmatched, r.x.inSegs, r.ip6In)
		// Beside the SYNs (IPv4), only the link's own background
		// reaches the limiter: MLD reports and neighbour discovery
		// from F's end, IPv6, unmatched and taken in by the stack.
		if r.v != (verdicts{}) || r.unmatched < r.arrived || r.unmatched-r.arrived > r.ip6In {
			t.Errorf("of %d SYNs to port %d: %v, %d unmatched (and %d IPv6 packets taken in beside them); want all unmatched",
				r.arrived, closedPort, r.v, r.unmatched, r.ip6In)
		}
		if r.x.inSegs < r.arrived {
			t.Errorf("%d SYNs to port %d arrived, the listener's stack took in %d segments", r.arrived, closedPort, r.x.inSegs)
		}
	})
}

// oddCounts is what TestSynCookieForgedAndOddSegments reads before and
// after a batch of frames.
type oddCounts struct {
	v         verdicts
	x         tcpExt
	drops     uint64
	sink      uint64
	others    uint64 // connections accepted from anyone
	unmatched uint64
	ip6       uint64 // IPv6 packets the listener's stack took in
}

func (cl *cookieLab) readOddCounts(t *testing.T) oddCounts {
	var b oddCounts
	stack := cl.PeerNS.Snapshot(t)
	b.v, b.x, b.ip6, b.sink = cl.verdicts(t), tcpExtOf(stack), stack.IP6InReceives, cl.sink.dropped(t)
	b.drops, _ = cl.ringDrops(t)
	for _, k := range cl.srv.accepted() {
		b.others += uint64(k)
	}
	_, cs := cl.cookieRule(t)
	b.unmatched = cs[maps.CounterUnmatched].Packets
	return b
}

// oddOutcome is what a batch of frames did: those that reached the
// limiter (sent less those the listener's full ring dropped) and what
// changed.
type oddOutcome struct {
	arrived          uint64
	v                verdicts
	x                tcpExt
	sink, accepted   uint64
	unmatched, ip6In uint64
}

// sendOdd sends n copies of frame from src and returns what they did.
func (cl *cookieLab) sendOdd(t *testing.T, frame []byte, src pktgen.Sources, n uint64) oddOutcome {
	b := cl.readOddCounts(t)
	// In calls of one live-frames batch (64): within a call the
	// generator reuses pages its receiver sent back, and a page
	// whose frame the limiter shrank into a SYN-ACK comes back
	// that short, truncating a longer frame (a SYN with payload:
	// 244 of 500 arrived truncated in one call).
	var sent uint64
	for sent < n {
		sent += cl.send(t, frame, src, min(64, n-sent)).Sent
	}
	cl.settle(t)
	a := cl.readOddCounts(t)
	return oddOutcome{arrived: sent - (a.drops - b.drops), v: a.v.minus(b.v), x: a.x.minus(b.x),
		sink: a.sink - b.sink, accepted: a.others - b.others,
		unmatched: a.unmatched - b.unmatched, ip6In: a.ip6 - b.ip6}
}
