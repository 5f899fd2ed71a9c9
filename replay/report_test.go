// SPDX-License-Identifier: Apache-2.0

package replay

import (
	"bytes"
	"encoding/hex"
	"net/netip"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/pktgen"
)

// TestReportText pins the printed report of a small capture with one frame
// of every kind, and the notes about frames the capture or the kernel cut.
func TestReportText(t *testing.T) {
	p := parsePolicy(t, `deny: [203.0.113.0/24]
rules:
  - name: dns
    match: {protocol: udp, dst_ports: [53]}
    limit: {algorithm: token_bucket, rate: 1/s, burst: 2}
`)
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	ms := time.Millisecond
	// A frame longer than a page, whatever the page size (4 KiB on x86,
	// up to 64 KiB on arm64), which a test run cuts; at most 65000 bytes,
	// as an IPv4 packet holds no more than 65535.
	long := min(os.Getpagesize(), 65000)
	frames := []rec{
		{at: 0, data: pktgen.UDP4(a, dst4, 4000, 53, 18)},
		{at: 1 * ms, data: pktgen.UDP4(a, dst4, 4000, 53, 18)},
		{at: 2 * ms, data: pktgen.UDP4(a, dst4, 4000, 53, 18)},
		{at: 3 * ms, data: pktgen.UDP4(netip.MustParseAddr("203.0.113.5"), dst4, 4000, 53, 18)},
		{at: 4 * ms, data: arp(t)},
		{at: 5 * ms, data: make([]byte, 10)},
		{at: 6 * ms, data: pktgen.UDP4(a, dst4, 4000, 80, 18)},
		// Stamped before the frame ahead of it, cut by the capture's
		// snap length, and too long for a test run all the same.
		{at: 1 * ms, data: pktgen.UDP4(b, dst4, 4000, 53, long), wire: long + 1000},
		{at: 2 * time.Second, data: pktgen.UDP4(a, dst4, 4000, 53, 18)},
	}
	path := writeCapture(t, pcapNanos, frames)
	r := replayFile(t, p, path, Options{Top: 5, Explain: []int{9, 3, 4, 5, 6, 7, 8, 1}})
	r.Capture = "c.pcap"
	// The kernel test-runs at most a page less head- and tailroom (3520
	// bytes with 4 KiB pages) and cuts the rest: frame 8 counts what it
	// kept.
	cut := r.Explained[6].Len
	if cut >= len(frames[7].data) || cut < long*3/4 {
		t.Fatalf("frame 8 of %d bytes ran as %d", len(frames[7].data), cut)
	}
	var out bytes.Buffer
	if err := r.Write(&out); err != nil {
		t.Fatal(err)
	}
	want := `policy test.yaml (sha256 ` + hex.EncodeToString(p.SHA256[:8]) + `), mode enforce
capture c.pcap: 9 frames over 2.000000000s
state table 65536 entries, every source tracked from its first packet

RULE  PASS PKTS  PASS BYTES  DROP PKTS  DROP BYTES  SHADOW PKTS  SHADOW BYTES  REFUSED BY LEVEL
dns   3          180         1          60          0            0             own=1

NOT BY A RULE  PKTS  BYTES  VERDICT
allow list     0     0      pass
deny list      1     60     drop
unmatched      1     60     pass
malformed      2     ` + strconv.Itoa(10+cut) + `   pass
non-IP         1     60     pass

UNPARSED KIND  PKTS  BYTES
truncated      1     ` + strconv.Itoa(cut) + `
note: 1 frame shorter than an Ethernet header: counted as malformed without running the program, which refuses them
note: 1 frame captured shorter than on the wire (snap length): padded with zeros to their length on the wire
note: 1 frame longer than the kernel test-runs (a page less head- and tailroom): it cut them, and their IP length then runs past the frame (unparsed, truncated), as no XDP program without multi-buffer support sees such frames on a device
note: 1 frame stamped earlier than the frame before them: each ran at its own time

TOP SOURCES DROPPED  RULE       DROP PKTS  DROP BYTES  SHADOW PKTS  SHADOW BYTES
192.0.2.1            dns        1          60          0            0
203.0.113.5          deny list  1          60          0            0

frame 1 at +0.000000000s, 60 bytes, udp 192.0.2.1:4000 > 10.0.0.1:53
  rule dns (#1, line 3), key src_ip 192.0.2.1/32: pass: within its limit
frame 3 at +0.002000000s, 60 bytes, udp 192.0.2.1:4000 > 10.0.0.1:53
  rule dns (#1, line 3), level 0 (own limit: token_bucket 1 pkt/s burst 2), key src_ip 192.0.2.1/32: drop
frame 4 at +0.003000000s, 60 bytes, udp 203.0.113.5:4000 > 10.0.0.1:53
  deny list entry 203.0.113.0/24: drop
frame 5 at +0.004000000s, 60 bytes, ethertype 0x0806 (ARP)
  not IPv4 or IPv6: pass
frame 6 at +0.005000000s, 10 bytes, no Ethernet header
  shorter than an Ethernet header: counted as malformed without running the program (which refuses it); the datapath passes malformed frames
frame 7 at +0.006000000s, 60 bytes, udp 192.0.2.1:4000 > 10.0.0.1:80
  no rule matches: pass
frame 8 at +0.001000000s, ` + strconv.Itoa(cut) + ` bytes, udp 192.0.2.2:4000 > 10.0.0.1:53
  unparsed, truncated (a header runs past the frame or the IP length): the policy's unparsed action: pass
frame 9 at +2.000000000s, 60 bytes, udp 192.0.2.1:4000 > 10.0.0.1:53
  rule dns (#1, line 3), key src_ip 192.0.2.1/32: pass: within its limit
`
	if got := out.String(); got != want {
		t.Errorf("report:\n%s\nwant:\n%s", got, want)
	}
}
