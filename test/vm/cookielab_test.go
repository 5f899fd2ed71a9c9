// SPDX-License-Identifier: Apache-2.0

package vm

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/loader"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

// The SYN cookie lab: a listener behind the limiter, a flood of forged SYNs
// and a real client, each in a namespace of its own.
//
//	client C ──veth── F: router, and the flood's namespace ──veth── L: listener
//	                                                         xdplimit on L's end
//
// The client reaches the listener through the interface the flood arrives
// on and the limiter is attached to, so that one limiter, with one global
// level, judges both, as on a server's uplink. F forwards between C and L
// and blackholes everything else, so the SYN-ACKs to forged sources, from
// XDP or from the kernel, end there and nothing leaves the lab; L's default
// route points at F, a real next hop, which the kernel needs to answer a
// SYN at all (TRAPS.md: without a route it drops SYNs before its SYN
// queue). Simpler shapes miss something: the flood and the client on two
// interfaces of L would meet two limiters with a global level each, and a
// bridge in front of L would add its own per-packet cost to the flood.
//
// F's end of the listener's veth carries an XDP program of its own, the
// return sink: a frame XDP_TX'd out of a veth reaches the peer only through
// an XDP program there (TRAPS.md). It drops and counts what goes to the
// forged sources, as the Internet would swallow it, so that F's stack does
// not spend the flood's CPU routing SYN-ACKs into its blackhole (three
// quarters of a flood were lost to the listener's full ring that way), and
// passes the rest (the client's traffic) to be forwarded.

const (
	cookiePort = 8080 // the rule's port
	plainPort  = 8081 // a listener no rule matches
	closedPort = 8082 // no rule, no listener
)

var (
	// The listener's end of the veth (netns.VethConfig's defaults).
	listenerAddr = netip.MustParseAddr("198.18.0.2")
	routerAddr   = netip.MustParseAddr("198.18.0.1")
	clientNet    = netip.MustParsePrefix("198.18.1.2/24")
	clientGW     = netip.MustParsePrefix("198.18.1.1/24")
	// The flood's forged sources: 16M addresses, routed to F's blackhole.
	forgedSources = pktgen.Sources{Mode: pktgen.Random, First: netip.MustParseAddr("10.0.0.0"), Mask: 1<<24 - 1}
	forgedSource  = pktgen.Sources{First: netip.MustParseAddr("10.9.0.1")}
)

type cookieLab struct {
	*lab                   // F (NS) and L (PeerNS): attach, status and the generator work on L's end
	C      *testutil.Netns // the client's namespace
	client *testutil.Veth  // C's end (NS) and F's (PeerNS)
	sink   *returnSink     // on F's end of the listener's veth
	srv    *server
	policy string // the attach's policy file
}

// A flood beside a client is bounded by floodTimeout, and by floodBound
// frames: that timeout at 30 Mpps, three times the fastest the generator
// has run here (about 0.5 Mpps under the emulator; 6-7 on the host against
// the limiter, 10.6 against a pass program). The count is not sized from a
// short calibration: under the emulator those read 4 to 13 times below the
// sustained rate, and a flood so sized ran out before the client did. A
// client run stops its flood, and ends 30 s before the timeout whatever its
// dials and exchanges are waiting for (dialAll): on a fast machine the ring
// drops most of a client's segments with the flood's, and exchanges
// waiting out their minute outlasted the flood.
const (
	floodTimeout = 3 * time.Minute
	floodBound   = uint64(30e6 * (floodTimeout / time.Second))
)

func newCookieLab(t *testing.T) *cookieLab {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.RequireLiveFrames(t)
	id := testutil.UniqueID(t, "cf", "cl", "cc", "cr")
	f, l, c := testutil.NewNetns(t), testutil.NewNetns(t), testutil.NewNetns(t)
	v := testutil.NewVeth(t, f, l, testutil.VethConfig{Name: "cf" + id, PeerName: "cl" + id})
	cv := testutil.NewVeth(t, c, f, testutil.VethConfig{Name: "cc" + id, PeerName: "cr" + id,
		Addr: clientNet, PeerAddr: clientGW,
		Addr6: netip.MustParsePrefix("2001:2:0:1::2/64"), PeerAddr6: netip.MustParsePrefix("2001:2:0:1::1/64")})

	setSysctls(t, f, map[string]string{"net.ipv4.ip_forward": "1"})
	// attach refuses a syncookie rule without these (docs/policy.md).
	setSysctls(t, l, map[string]string{"net.ipv4.tcp_syncookies": "2", "net.ipv4.tcp_timestamps": "2"})
	addRoute(t, l, &netlink.Route{LinkIndex: v.PeerIndex, Gw: routerAddr.AsSlice()})
	addRoute(t, c, &netlink.Route{LinkIndex: cv.Index, Gw: clientGW.Addr().AsSlice()})
	addRoute(t, f, &netlink.Route{Dst: &net.IPNet{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}, Type: unix.RTN_BLACKHOLE})

	sink := attachReturnSink(t, f, v.Name)
	g, err := pktgen.Open(pktgen.Config{Timeout: floodTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	cl := &cookieLab{lab: &lab{Veth: v, gen: g}, C: c, client: cv, sink: sink, policy: filepath.Join(t.TempDir(), "policy.yaml")}
	cl.srv = startServer(t, l, cookiePort, plainPort)
	return cl
}

func setSysctls(t *testing.T, ns *testutil.Netns, kv map[string]string) {
	t.Helper()
	for k, v := range kv {
		if err := ns.SetSysctl(k, v); err != nil {
			t.Fatal(err)
		}
	}
}

func addRoute(t *testing.T, ns *testutil.Netns, r *netlink.Route) {
	t.Helper()
	if err := ns.Do(func() error { return netlink.RouteAdd(r) }); err != nil {
		t.Fatalf("route %v in %s: %v", r, ns, err)
	}
}

// cookiePolicy is one SYN rule on the cookie port: a per-source limit no
// client of these tests reaches, and a global one, with action action.
func cookiePolicy(global, action string) string {
	return fmt.Sprintf(`
rules:
  - name: syn
    match: {protocol: tcp, dst_ports: [%d], tcp_flags: [syn]}
    limit: {algorithm: token_bucket, rate: 5000/s, burst: 5000}
    aggregate:
      - key: global
        limit: %s
    action: %s
`, cookiePort, global, action)
}

// tightPolicy answers every SYN to the cookie port but the first (and the
// keepalives, one a second).
var tightPolicy = cookiePolicy("{algorithm: token_bucket, rate: 1/m, burst: 1}", "syncookie")

// attachPolicy starts an attach of the policy on the listener's end.
func (cl *cookieLab) attachPolicy(t *testing.T, policy string) *proc {
	t.Helper()
	if err := os.WriteFile(cl.policy, []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	p := cl.start(t, "attach", cl.PeerName, "--policy", cl.policy, "--detach-on-exit")
	// The verifier takes over 20 s with a syncookie rule under emulation.
	p.waitAttached(t)
	return p
}

// reload has the running attach apply a new policy (it owns its file) and
// waits until it did.
func (cl *cookieLab) reload(t *testing.T, policy string) {
	t.Helper()
	if err := os.WriteFile(cl.policy, []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := cl.run(t, "reload", cl.PeerName); err != nil {
		t.Fatalf("reload: %v\n%s", err, out)
	}
}

// A SYN as Linux sends one: MSS, SACK permitted, timestamps, window scale.
var linuxSYNOptions = []pktgen.TCPOption{pktgen.OptMSS(1460), pktgen.OptSACK(), pktgen.OptTimestamps(12345, 0),
	pktgen.OptNOP(), pktgen.OptWScale(7)}

// segment is a TCP segment from F to the listener's address; the generator
// rewrites its source.
func (cl *cookieLab) segment(dport uint16, flags pktgen.TCPFlags, payload int) []byte {
	f := pktgen.Frame{SrcMAC: cl.MAC, DstMAC: cl.PeerMAC, Src: forgedSource.First, Dst: listenerAddr,
		Proto: pktgen.ProtoTCP, SrcPort: 40000, DstPort: dport, TCPFlags: flags, TCPSeq: 1000, Payload: payload}
	if flags&pktgen.TCPSyn != 0 {
		f.TCPOptions = linuxSYNOptions
	} else {
		f.TCPAck = 0x5eed // no cookie the kernel made
	}
	return f.MustBuild()
}

// cookieRule reads the syn rule's counters and the limiter's global ones.
func (cl *cookieLab) cookieRule(t *testing.T) (maps.RuleStat, map[maps.Counter]maps.CounterValue) {
	t.Helper()
	st, err := loader.Open(cl.PeerName)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rules, err := st.Limiter.RuleStats()
	if err != nil {
		t.Fatal(err)
	}
	cs, err := st.Limiter.Counters()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules {
		if r.Name == "syn" {
			return r, cs
		}
	}
	t.Fatalf("no rule syn in force: %+v", rules)
	return maps.RuleStat{}, nil
}

// verdicts is what the syn rule did with what it judged.
type verdicts struct{ pass, drop, cookie, ackValid, ackInvalid, keepalive, unanswered uint64 }

func (cl *cookieLab) verdicts(t *testing.T) verdicts {
	r, cs := cl.cookieRule(t)
	return verdicts{pass: r.Verdicts[maps.VerdictPass].Packets, drop: r.Verdicts[maps.VerdictDrop].Packets,
		cookie: r.Verdicts[maps.VerdictCookie].Packets, ackValid: r.CookieACKs[0], ackInvalid: r.CookieACKs[1],
		keepalive: cs[maps.CounterCookieKeepalive].Packets, unanswered: cs[maps.CounterCookieUnanswered].Packets}
}

func (v verdicts) minus(b verdicts) verdicts {
	return verdicts{v.pass - b.pass, v.drop - b.drop, v.cookie - b.cookie, v.ackValid - b.ackValid,
		v.ackInvalid - b.ackInvalid, v.keepalive - b.keepalive, v.unanswered - b.unanswered}
}

func (v verdicts) String() string {
	return fmt.Sprintf("rule syn: pass %d (keepalive %d), drop %d (unanswered %d), answered with a cookie %d; cookie ACKs valid %d, invalid %d",
		v.pass, v.keepalive, v.drop, v.unanswered, v.cookie, v.ackValid, v.ackInvalid)
}

// tcpExt is what the listener's stack counted of SYN cookies and its
// queues (nstat's TcpExt* and Tcp* names).
type tcpExt struct{ sent, recv, failed, overflows, listenDrops, passiveOpens, inSegs uint64 }

func (cl *cookieLab) tcpExt(t *testing.T) tcpExt {
	return tcpExtOf(cl.PeerNS.Snapshot(t))
}

// tcpExtOf is tcpExt from a snapshot of the listener's counters already read.
func tcpExtOf(s testutil.Counters) tcpExt {
	c := s.Raw
	return tcpExt{c["TcpExt.SyncookiesSent"], c["TcpExt.SyncookiesRecv"], c["TcpExt.SyncookiesFailed"],
		c["TcpExt.ListenOverflows"], c["TcpExt.ListenDrops"], c["Tcp.PassiveOpens"], c["Tcp.InSegs"]}
}

func (x tcpExt) minus(b tcpExt) tcpExt {
	return tcpExt{x.sent - b.sent, x.recv - b.recv, x.failed - b.failed, x.overflows - b.overflows,
		x.listenDrops - b.listenDrops, x.passiveOpens - b.passiveOpens, x.inSegs - b.inSegs}
}

func (x tcpExt) String() string {
	return fmt.Sprintf("listener: TcpExtSyncookiesSent %d, SyncookiesRecv %d, SyncookiesFailed %d, ListenOverflows %d, ListenDrops %d, TcpPassiveOpens %d",
		x.sent, x.recv, x.failed, x.overflows, x.listenDrops, x.passiveOpens)
}

// ringDrops reads the frames each end of the listener's veth dropped before
// its XDP program saw them (its ring was full): to the listener, and back
// to the router. What the generator sent minus the first is what reached
// the limiter.
func (cl *cookieLab) ringDrops(t *testing.T) (toListener, toRouter uint64) {
	t.Helper()
	return cl.PeerNS.RxDropped(t, cl.PeerName), cl.NS.RxDropped(t, cl.Name)
}
