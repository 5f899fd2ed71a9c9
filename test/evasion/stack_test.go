// SPDX-License-Identifier: Apache-2.0

package evasion

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/maps"
)

const port = 9 // every generated UDP and TCP packet goes here; nothing listens

// The rules admit one UDP and one TCP packet to the port for the whole run
// (a global bucket of 1 that refills hourly); the rule counters say exactly
// how many they admitted.
const stackPolicy = `
rules:
  - name: udp
    match: {protocol: udp, dst_ports: [9]}
    key: global
    limit: {algorithm: token_bucket, rate: 1/h, burst: 1}
  - name: tcp
    match: {protocol: tcp, dst_ports: [9]}
    key: global
    limit: {algorithm: token_bucket, rate: 1/h, burst: 1}
`

// delivered counts what the receiving stack accepted at the transport
// layer: valid UDP datagrams for a port nobody listens on (NoPorts, v4 and
// v6) and TCP segments answered with a reset (every valid non-RST segment
// to a closed port). Neither counts frames the stack dropped earlier.
func delivered(c testutil.Counters) (udp, tcp uint64) {
	return c.Raw["Udp.NoPorts"] + c.Raw["Udp6NoPorts"], c.Raw["Tcp.OutRsts"]
}

// TestNoEvasion sends at least 100k adversarial frames (XDPL_EVASION_FRAMES
// to change) through a veth into a namespace whose stack counts what it
// delivers, with the XDP program attached and a policy that admits one
// packet per protocol. A datagram that reaches the transport layer beyond
// what the rules admitted stepped around them: the test replays the batch
// it was in, one datagram at a time, and prints the culprit as hex with the
// seed (XDPL_EVASION_SEED replays the run).
func TestNoEvasion(t *testing.T) {
	total := 100_000
	if s := os.Getenv("XDPL_EVASION_FRAMES"); s != "" {
		total, _ = strconv.Atoi(s)
	}
	noEvasion(t, stackPolicy, 0, total)
}

// TestNoEvasionManyTags: Linux pops any number of VID-0 tags, and so does
// the parser (8 inline, the rest in a walk up to 1024): frames with up to
// 100 tags are judged under the default unparsed action, pass. With a
// parser that gave up after 8 this test failed (110 deliveries in the first
// batch of 1000 frames).
func TestNoEvasionManyTags(t *testing.T) {
	noEvasion(t, stackPolicy, 100, 20_000)
}

func noEvasion(t *testing.T, policy string, maxTags, total int) {
	testutil.RequireRoot(t)
	s := seed(t)
	t.Logf("seed %d (XDPL_EVASION_SEED=%d to replay)", s, s)

	v := testutil.NewVethPair(t, testutil.VethConfig{})
	l := xdpltest.Load(t, maps.Options{Clock: maps.ClockKtime}, policy)
	if err := v.PeerNS.Do(func() error { return routesBack(v) }); err != nil {
		t.Fatal(err)
	}
	tx := openSender(t, v)
	target := Target{SrcMAC: v.MAC, DstMAC: v.PeerMAC, Dst4: v.PeerAddr, Dst6: v.PeerAddr6, Port: port, MaxTags: maxTags}
	controlRun(t, v, tx, target)

	attachXDP(t, v, l)
	g := NewGen(s, target)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admitted := func() uint64 { return admittedBy(t, l) }
	base := v.PeerNS.Snapshot(t)
	excess := func() int64 {
		u, c := delivered(v.PeerNS.Snapshot(t).Delta(base))
		return int64(u+c) - int64(admitted())
	}
	sent := 0
	for batch := 0; sent < total; batch++ {
		if ctx.Err() != nil {
			t.Fatalf("timed out after %d frames", sent)
		}
		var groups [][][]byte
		for n := 0; n < 1000; {
			grp := g.Group()
			groups = append(groups, grp)
			n += len(grp)
		}
		before := excess()
		for _, grp := range groups {
			sent += tx.send(t, grp...)
		}
		time.Sleep(20 * time.Millisecond) // the receiving NAPI and stack
		if excess() > before {
			time.Sleep(200 * time.Millisecond)
			culprits := bisect(t, tx, groups, excess)
			t.Fatalf("seed %d, batch %d: the stack delivered %d more packets than the rules admitted; culprits:\n%s",
				s, batch, excess()-before, culprits)
		}
	}
	time.Sleep(200 * time.Millisecond)
	u, c := delivered(v.PeerNS.Snapshot(t).Delta(base))
	t.Logf("%d frames sent; delivered %d UDP, %d TCP; the rules admitted %d", sent, u, c, admitted())
	if e := excess(); e > 0 {
		t.Fatalf("seed %d: the stack delivered %d more packets than the rules admitted (late)", s, e)
	}
	ups, err := l.UnparsedCounters()
	if err != nil {
		t.Fatal(err)
	}
	for k, up := range ups {
		t.Logf("unparsed %v: %d", maps.UnparsedKind(k), up.Packets)
	}
	if u+c == 0 && admitted() == 0 {
		t.Fatal("nothing was judged or delivered: the generator or the lab is broken")
	}
}

// attachXDP attaches l's program to v's receiving end until the test ends.
func attachXDP(t *testing.T, v *testutil.Veth, l *maps.Limiter) {
	err := v.PeerNS.Do(func() error {
		lk, err := link.AttachXDP(link.XDPOptions{Program: l.Program(), Interface: v.PeerIndex})
		if err != nil {
			return err
		}
		t.Cleanup(func() { lk.Close() })
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// admittedBy is how many packets l's rules admitted, shadow included.
func admittedBy(t *testing.T, l *maps.Limiter) uint64 {
	st, err := l.RuleStats()
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, r := range st {
		n += r.Verdicts[maps.VerdictPass].Packets + r.Verdicts[maps.VerdictShadow].Packets
	}
	return n
}

// bisect replays a batch one datagram at a time and lists those that
// raise the excess, as hex.
func bisect(t *testing.T, tx *sender, groups [][][]byte, excess func() int64) string {
	var out string
	for _, grp := range groups {
		before := excess()
		tx.send(t, grp...)
		time.Sleep(5 * time.Millisecond)
		if excess() > before {
			for _, f := range grp {
				out += fmt.Sprintf("  %x\n", f)
			}
			out += "\n"
		}
	}
	if out == "" {
		out = "  (none on replay: look at the whole batch with the seed)\n"
	}
	return out
}

// routesBack gives the receiving namespace default routes through the
// sender, for the resets to random sources.
func routesBack(v *testutil.Veth) error {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return err
	}
	defer h.Close()
	for _, gw := range []string{v.Addr.String(), v.Addr6.String()} {
		r := &netlink.Route{LinkIndex: v.PeerIndex, Gw: netIP(gw)}
		if err := h.RouteAdd(r); err != nil {
			return fmt.Errorf("default route via %s: %w", gw, err)
		}
	}
	return nil
}

// controlRun sends generated frames before the program is attached and
// requires the stack to deliver many of them, UDP and TCP, IPv4 and IPv6:
// the counters the test trusts do see deliveries, and the generator makes
// deliverable frames.
func controlRun(t *testing.T, v *testutil.Veth, tx *sender, target Target) {
	g := NewGen(1, target)
	base := v.PeerNS.Snapshot(t)
	sent := 0
	for sent < 3000 {
		sent += tx.send(t, g.Group()...)
	}
	time.Sleep(200 * time.Millisecond)
	d := v.PeerNS.Snapshot(t).Delta(base)
	u4, u6, tcp := d.Raw["Udp.NoPorts"], d.Raw["Udp6NoPorts"], d.Raw["Tcp.OutRsts"]
	t.Logf("control, no program: %d frames sent, the stack delivered %d UDP (IPv4), %d UDP (IPv6), %d TCP", sent, u4, u6, tcp)
	if min := uint64(sent / 20); u4 < min || u6 < min || tcp < min {
		t.Fatal("the stack delivered few generated frames without the program: the lab or the generator is broken")
	}
}
