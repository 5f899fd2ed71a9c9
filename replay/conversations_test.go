// SPDX-License-Identifier: Apache-2.0

package replay

import (
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/pktgen"
)

// dnsAt is a DNS datagram between a and b with the given ID, its UDP
// checksum none (0, which IPv4 allows) as the ID is patched in.
func dnsAt(src, dst string, sport, dport, id uint16) []byte {
	b := pktgen.Frame{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst), SrcPort: sport, DstPort: dport,
		Payload: 12}.MustBuild()
	binary.BigEndian.PutUint16(b[14+20+6:], 0)
	binary.BigEndian.PutUint16(b[14+20+8:], id)
	return b
}

// TestReplayReflectionGuard replays both directions of a plain Ethernet
// capture (no direction in it; --local names the host): the host's DNS
// query goes through the request recorder, its answer passes, forged
// answers and a late one are dropped; the tcp check is reported as not
// replayed.
func TestReplayReflectionGuard(t *testing.T) {
	const host, resolver = "198.51.100.1", "192.0.2.53"
	path := writeCapture(t, pcapNanos, []rec{
		{at: 0, data: dnsAt(host, resolver, 40000, 53, 0x1234)},
		{at: 10 * time.Millisecond, data: dnsAt(resolver, host, 53, 40000, 0x1234)},
		{at: 20 * time.Millisecond, data: dnsAt("192.0.2.66", host, 53, 40000, 0x1234)},
		{at: 30 * time.Millisecond, data: dnsAt(resolver, host, 53, 40000, 0x9999)},
		{at: 31 * time.Second, data: dnsAt(resolver, host, 53, 40000, 0x1234)},
	})
	p := parsePolicy(t, "conversations: {tcp: always, reflection: always}\nrules: []\n")
	r := replayFile(t, p, path, Options{Local: []netip.Prefix{netip.MustParsePrefix(host + "/32")}})
	if r.Outgoing.Packets != 1 || r.RequestsRecorded != 1 {
		t.Errorf("%d frames sent by the host, %d requests recorded; want 1 and 1", r.Outgoing.Packets, r.RequestsRecorded)
	}
	if r.NoRequest.Packets != 3 || r.Unmatched.Packets != 1 {
		t.Errorf("no_request %d, unmatched (passed) %d; want 3 and 1", r.NoRequest.Packets, r.Unmatched.Packets)
	}
	if len(r.NotReplayed) != 1 || r.NotReplayed[0] != "tcp" {
		t.Errorf("not replayed %v, want [tcp]", r.NotReplayed)
	}
	var b strings.Builder
	r.Write(&b)
	for _, want := range []string{"answers to no request", "the reflection guard knew 1 request", "conversation checks not replayed (tcp)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, b.String())
		}
	}
	// Without --local, nothing in the capture is the host's, and the
	// guard judges nothing, which the report says.
	r = replayFile(t, p, path, Options{})
	b.Reset()
	r.Write(&b)
	if r.RequestsRecorded != 0 || r.NoRequest.Packets != 0 || !strings.Contains(b.String(), "the reflection guard judged nothing") {
		t.Errorf("without --local: %d requests, %d no_request; want 0 and 0, and a note:\n%s", r.RequestsRecorded,
			r.NoRequest.Packets, b.String())
	}
}
