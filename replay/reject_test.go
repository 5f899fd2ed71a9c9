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

// TestRejectReplay: a replay reports the answers a reject rule would send,
// within one a second per source in the capture's time, and counts the
// packets it would drop unanswered as drops.
func TestRejectReplay(t *testing.T) {
	p := parsePolicy(t, `
rules:
  - name: api
    match: {protocol: tcp, dst_ports: [443]}
    limit: {algorithm: token_bucket, rate: 1/m, burst: 1}
    action: reject
`)
	syn := pktgen.Frame{Src: netip.MustParseAddr("198.51.100.7"), Dst: dst4, Proto: pktgen.ProtoTCP,
		SrcPort: 40000, DstPort: 443}.MustBuild()
	var frames []rec
	// 10 SYNs a second for 2 seconds: the first admitted, then one
	// answer a second.
	for i := 0; i < 20; i++ {
		frames = append(frames, rec{at: time.Duration(i) * 100 * time.Millisecond, data: syn})
	}
	r := replayFile(t, p, writeCapture(t, pcapNanos, frames), Options{Top: 3})
	got := r.Rules[0]
	if got.Pass.Packets != 1 || got.Reject.Packets != 2 || got.Drop.Packets != 17 || got.Refused[0] != 19 {
		t.Errorf("pass %d, answers %d, drops %d, refused %d; want 1, 2, 17, 19", got.Pass.Packets, got.Reject.Packets,
			got.Drop.Packets, got.Refused[0])
	}
	if len(r.Top) != 1 || r.Top[0].Reject.Packets != 2 || r.Top[0].Drop.Packets != 17 {
		t.Errorf("top sources %+v", r.Top)
	}
	var out bytes.Buffer
	if err := r.Write(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "REJECTS SENT") || !strings.Contains(out.String(), "with a TCP reset or an ICMP error") {
		t.Errorf("report says nothing of the answers:\n%s", out.String())
	}
}
