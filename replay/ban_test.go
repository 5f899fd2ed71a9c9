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

const sshBanPolicy = `
rules:
  - name: ssh
    match: {protocol: tcp, dst_ports: [22], tcp_flags: [syn]}
    limit: {algorithm: fixed_window, packets: 5, window: 10s}
    action: ban
    ban: {for: 30s}
`

// An SSH brute force: one source sends a SYN a second. The sixth in a
// window is refused and bans the source for 30 s: its SYNs are dropped,
// and so is anything else it sends, until the ban ends and its next SYN
// passes. Another source is never touched.
func TestReplayBans(t *testing.T) {
	attacker, user := netip.MustParseAddr("198.51.100.66"), netip.MustParseAddr("192.0.2.10")
	dst := netip.MustParseAddr("10.0.0.1")
	var frames []rec
	syn := func(at time.Duration, src netip.Addr) {
		frames = append(frames, rec{at: at, data: pktgen.TCP4(src, dst, 40000, 22, pktgen.TCPSyn, 0)})
	}
	for s := range 6 { // 0..5 s: five pass, the sixth starts the ban
		syn(time.Duration(s)*time.Second, attacker)
	}
	syn(5500*time.Millisecond, user)
	for _, at := range []time.Duration{10 * time.Second, 20 * time.Second, 34 * time.Second} {
		syn(at, attacker) // banned until 35 s
		frames = append(frames, rec{at: at, data: pktgen.UDP4(attacker, dst, 4000, 53, 10)})
	}
	syn(36*time.Second, attacker) // the ban has ended: a fresh window
	got := replayFile(t, parsePolicy(t, sshBanPolicy), writeCapture(t, pcapng, frames), Options{Top: 3, Explain: []int{8}})

	ssh := got.Rules[0]
	if ssh.Pass.Packets != 7 || ssh.Drop.Packets != 1 {
		t.Errorf("ssh rule: pass %d drop %d, want 7 and 1", ssh.Pass.Packets, ssh.Drop.Packets)
	}
	if got.Banned.Packets != 6 {
		t.Errorf("banned frames %d, want 6", got.Banned.Packets)
	}
	if len(got.Bans) != 1 {
		t.Fatalf("bans %+v, want one", got.Bans)
	}
	b := got.Bans[0]
	if b.Prefix != netip.MustParsePrefix("198.51.100.66/32") || b.Rule != "ssh" || b.Frame != 6 ||
		b.Start != 5*time.Second || b.For != 30*time.Second {
		t.Errorf("ban %+v", b)
	}
	if len(got.Explained) != 1 || !strings.Contains(got.Explained[0].Text, "the source is banned") {
		t.Errorf("explained %+v", got.Explained)
	}
	var out bytes.Buffer
	if err := got.Write(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"banned sources  6", "198.51.100.66/32  ssh   6      5.000000000s  30s  35.000000000s\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}
