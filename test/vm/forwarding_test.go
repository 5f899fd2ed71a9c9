// SPDX-License-Identifier: Apache-2.0

package vm

import (
	"os"
	"testing"

	"github.com/xdplimit/xdplimit/pktgen"
)

// The TCP check on a router: xdplimit on the router F's end of the
// client's veth judges what F forwards to the listener by F's connection
// tracking (forwarded: conntrack), while a forged ACK flood from the
// client's side and a real transfer (iperf3, client to listener) cross it.
// The same flood with no check is reported beside it.

// TestConversationForwardedACKFlood: with conntrack lookups, every forged
// ACK that met the router's program is dropped there, the listener sends
// no resets, and the transfer, which conntrack tracks, completes.
func TestConversationForwardedACKFlood(t *testing.T) {
	cl := newCookieLab(t)
	cl.NS.TrackConnections(t)
	cr := cl.client.PeerName
	// The forged sources are routed to F's blackhole: without this F's
	// reverse-path filter would drop the flood itself, checked or not.
	setSysctls(t, cl.NS, map[string]string{"net.ipv4.conf.all.rp_filter": "0", "net.ipv4.conf." + cr + ".rp_filter": "0"})
	fw := &lab{Veth: cl.client, gen: cl.gen}
	ack := pktgen.Frame{SrcMAC: cl.client.MAC, DstMAC: cl.client.PeerMAC, Src: forgedSource.First, Dst: listenerAddr,
		Proto: pktgen.ProtoTCP, SrcPort: 40000, DstPort: iperfPort, TCPFlags: pktgen.TCPAck, TCPSeq: 1000, TCPAck: 0x5eed}
	runs := []*ackFloodRun{
		// The check first: the flood without it leaves conntrack entries
		// behind (netfilter picks up connections mid-stream).
		{name: "conntrack check", policy: "conversations: {tcp: {when: always, forwarded: conntrack}}\nrules: []\n"},
		{name: "no check", policy: "rules: []\n"},
	}
	policy := writePolicy(t, runs[0].policy)
	p := fw.start(t, "attach", cr, "--policy", policy, "--detach-on-exit")
	p.waitAttached(t)
	for i, r := range runs {
		if i > 0 {
			if err := os.WriteFile(policy, []byte(r.policy), 0o644); err != nil {
				t.Fatal(err)
			}
			if out, err := fw.run(t, "reload", cr); err != nil {
				t.Fatalf("reload: %v\n%s", err, out)
			}
		}
		cl.ackFloodRound(t, r, fw, ack.MustBuild(), cl.NS, cr)
	}
	judgeACKFlood(t, runs[0], runs[1])
}
