// SPDX-License-Identifier: Apache-2.0

package replay

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/pktgen"
)

// TestSynCookieReplay: a replay reports the SYNs a syncookie rule would
// answer, apart from its drops, and the one SYN a second per destination
// it would pass to the stack instead.
func TestSynCookieReplay(t *testing.T) {
	p := parsePolicy(t, `
rules:
  - name: syn
    match: {protocol: tcp, dst_ports: [443], tcp_flags: [syn]}
    limit: {algorithm: token_bucket, rate: 1/m, burst: 1}
    action: syncookie
`)
	src := netip.MustParseAddr("198.51.100.7")
	syn := pktgen.Frame{Src: src, Dst: dst4, Proto: pktgen.ProtoTCP, SrcPort: 40000, DstPort: 443,
		TCPOptions: []pktgen.TCPOption{pktgen.OptMSS(1460)}}.MustBuild()
	ack := pktgen.Frame{Src: src, Dst: dst4, Proto: pktgen.ProtoTCP, SrcPort: 40000, DstPort: 443,
		TCPFlags: pktgen.TCPAck, TCPAck: 12345}.MustBuild()
	var frames []rec
	// 10 SYNs within the first second, 10 in the next: the first is
	// admitted, the first refused one of each second passed, the rest
	// answered.
	for i := 0; i < 20; i++ {
		frames = append(frames, rec{at: time.Duration(i) * 100 * time.Millisecond, data: syn})
	}
	frames = append(frames, rec{at: 2100 * time.Millisecond, data: ack})
	path := writeCapture(t, pcapNanos, frames)
	r := replayFile(t, p, path, Options{Top: 3})
	got := r.Rules[0]
	if got.Pass.Packets != 3 || got.Cookie.Packets != 17 || got.Drop.Packets != 0 {
		t.Errorf("pass %d, SYN-ACKs %d, drops %d; want 3, 17, 0", got.Pass.Packets, got.Cookie.Packets, got.Drop.Packets)
	}
	if got.Refused[0] != 17 {
		t.Errorf("refused by the rule's level %d, want 17", got.Refused[0])
	}
	// The ACK matches no rule, and is not checked against the cookies.
	if r.Unmatched.Packets != 1 {
		t.Errorf("unmatched %d, want the ACK", r.Unmatched.Packets)
	}
	var out bytes.Buffer
	if err := r.Write(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "SYN-ACKS SENT") || !strings.Contains(out.String(), "answer with a SYN cookie") {
		t.Errorf("report says nothing of the SYN-ACKs:\n%s", out.String())
	}
}
