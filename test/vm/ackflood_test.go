// SPDX-License-Identifier: Apache-2.0

package vm

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/harness/iperf3"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

// An ACK flood beside a real TCP transfer (iperf3, from the client's
// namespace through the router into the listener's), three ways: the tcp
// conversation check, no check, and today's only other lever, a global
// limit on ACKs to the port. The transfer's throughput under each is
// reported side by side: the collateral of each answer.

const iperfPort = 5201

// iperf runs one iperf3 transfer of d from the client's namespace to a
// one-off server in the listener's, and returns its received throughput
// in bit/s, or the error that ended it (a transfer still running 20 s
// after its end was due is killed).
func (cl *cookieLab) iperf(t *testing.T, d time.Duration) (float64, error) {
	t.Helper()
	bin, err := exec.LookPath("iperf3")
	testutil.Require(t, err == nil, "iperf3 not found (Debian package iperf3; run make deps)")
	// A transfer stalled by the flood (the global limit's) is given up
	// after this: it did not complete.
	ctx, cancel := context.WithTimeout(context.Background(), d+20*time.Second)
	defer cancel()
	srv := exec.CommandContext(ctx, bin, "-s", "-1", "-p", fmt.Sprint(iperfPort), "-B", listenerAddr.String())
	if err := cl.PeerNS.Do(srv.Start); err != nil {
		t.Fatalf("iperf3 server: %v", err)
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	var bps float64
	var reported string
	// The client is refused until the server listens: try again then.
	for range 50 {
		var out []byte
		_ = cl.C.Do(func() error {
			out, err = exec.CommandContext(ctx, bin, "-c", listenerAddr.String(), "-p", fmt.Sprint(iperfPort),
				"-t", fmt.Sprint(int(d/time.Second)), "-J", "--connect-timeout", "2000").Output()
			return nil
		})
		var perr error
		if bps, reported, perr = iperf3.Parse(out); perr != nil {
			return 0, fmt.Errorf("iperf3: %v; %w", err, perr)
		}
		if !strings.Contains(reported, "Connection refused") || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if reported != "" {
		return 0, fmt.Errorf("iperf3: %s", reported)
	}
	return bps, err
}

// ackFloodRun is one way of meeting the flood, and what came of it.
type ackFloodRun struct {
	name, policy string
	bps          float64
	err          error
	st           stackView
	noConn, seen uint64
	// forged: what the listener sent to the forged sources (its resets
	// to the forged ACKs that reached it), which F's sink counts; the
	// rest of its resets answer the transfer's own (a connection tried
	// before iperf3's server listened).
	forged     uint64
	resets     uint64 // of forged, the resets
	lastForged string // the last of them, described
}

func TestConversationACKFloodTransfer(t *testing.T) {
	cl := newCookieLab(t)
	runs := []*ackFloodRun{
		{name: "tcp check", policy: "conversations: {tcp: always}\nrules: []\n"},
		{name: "no check", policy: "rules: []\n"},
		{name: "global ACK limit", policy: fmt.Sprintf(`rules:
  - name: acks
    match: {protocol: tcp, dst_ports: [%d], tcp_flags: [ack]}
    key: global
    limit: {algorithm: token_bucket, rate: 1000/s, burst: 1000}
`, iperfPort)},
	}
	// A forged ACK of no connection to the transfer's port.
	ack := cl.segment(iperfPort, pktgen.TCPAck, 0)
	for i, r := range runs {
		if i == 0 {
			cl.attachPolicy(t, r.policy)
		} else {
			cl.reload(t, r.policy)
		}
		cl.ackFloodRound(t, r, cl.lab, ack, cl.PeerNS, cl.PeerName)
	}
	judgeACKFlood(t, runs[0], runs[1])
}

// ackFloodRound runs r's transfer beside a flood of frame from sender's
// end, and reads what the program on ifname in ns and the listener made
// of it.
func (cl *cookieLab) ackFloodRound(t *testing.T, r *ackFloodRun, sender *lab, frame []byte, ns *testutil.Netns, ifname string) {
	t.Helper()
	before, c0, sunk0, rst0 := cl.stack(t), convCounters(t, ifname), cl.sink.dropped(t), cl.sink.resets(t)
	rx0, ring0 := ns.RxSeen(t, ifname), ns.RxDropped(t, ifname)
	flood := sender.startFlood(t, frame, forgedSources, floodBound)
	time.Sleep(500 * time.Millisecond)
	r.bps, r.err = cl.iperf(t, 3*time.Second)
	_, running := flood.stop(t)
	cl.PeerNS.Settle(t)
	r.st = cl.stack(t).minus(before)
	r.forged, r.resets = cl.sink.dropped(t)-sunk0, cl.sink.resets(t)-rst0
	if r.forged > 0 {
		r.lastForged = cl.sink.lastFrame(t)
	}
	r.noConn = convCounters(t, ifname)[maps.CounterNoConnection] - c0[maps.CounterNoConnection]
	r.seen = ns.RxSeen(t, ifname) - rx0 - (ns.RxDropped(t, ifname) - ring0)
	t.Logf("%-16s transfer %.1f Mbit/s (err %v); %d frames met the program on %s, %d dropped as no_connection; %s, %d of them to forged sources (%d resets)%s",
		r.name, r.bps/1e6, r.err, r.seen, ifname, r.noConn, r.st, r.forged, r.resets, lastOf(r.lastForged))
	if !running {
		t.Errorf("%s: the flood ended before the transfer did", r.name)
	}
}

// lastOf is ", the last: desc" for a frame's description, "" for none.
func lastOf(desc string) string {
	if desc == "" {
		return ""
	}
	return ", the last: " + desc
}

// judgeACKFlood judges a flood of forged ACKs met by a check against the
// same flood met by none: with the check the transfer completes, no
// forged ACK reaches the listener (it sends no reset to a forged source),
// and every frame that met the program but the transfer's was dropped;
// without it the flood must have reached the listener, or the comparison
// shows nothing.
func judgeACKFlood(t *testing.T, check, none *ackFloodRun) {
	t.Helper()
	if check.err != nil || check.bps == 0 {
		t.Errorf("%s: the transfer under the flood failed: %v", check.name, check.err)
	}
	// The kernel's cookie check takes a random acknowledgment number for a
	// valid cookie about twice in a billion (its time within 2 of 256
	// values, its MSS index within 4 of 2^24): the tcp check lets such an
	// ACK through, as it cannot tell it from the ACK of a cookie that it or
	// the stack sent. The listener (tcp_syncookies=2) then opens a
	// connection to the forged source, whose frames (iperf3's server
	// closes it: a FIN, its retransmits) are no reset. A forged ACK that
	// reached the stack without a valid cookie is answered with a reset:
	// one in a run of millions of forged ACKs may be such a cookie's end;
	// more is a leak.
	if check.resets > 1 {
		t.Errorf("%s: the listener sent %d resets to forged sources: forged ACKs reached its stack (the last frame: %s)",
			check.name, check.resets, check.lastForged)
	} else if check.forged > 0 {
		t.Logf("%s: %d frames to forged sources, %d of them resets: a forged ACK passed as a valid SYN cookie of the kernel's (%s)",
			check.name, check.forged, check.resets, check.lastForged)
	}
	// What met the program and reached the listener's stack is the
	// transfer's own (and its handshake's); everything else was dropped.
	if check.noConn+check.st.ipIn+20 < check.seen {
		t.Errorf("%s: %d frames met the program, %d reached the listener's stack, only %d were dropped as no_connection",
			check.name, check.seen, check.st.ipIn, check.noConn)
	}
	if none.resets < 1000 {
		t.Errorf("%s: the listener sent only %d resets to forged sources: the flood did not reach it, the comparison shows nothing",
			none.name, none.resets)
	}
}
