// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/xdplimit/xdplimit/pktgen"
	"github.com/xdplimit/xdplimit/policy"
)

type timedFrame struct {
	at    time.Duration
	frame []byte
}

// writeTimedCapture writes frames to a pcap capture at their offsets from
// 2024-01-01, in time order, and returns its path.
func writeTimedCapture(t *testing.T, frames []timedFrame) string {
	t.Helper()
	slices.SortStableFunc(frames, func(a, b timedFrame) int { return int(a.at - b.at) })
	var buf bytes.Buffer
	w := pcapgo.NewWriter(&buf)
	if err := w.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	start := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, f := range frames {
		ci := gopacket.CaptureInfo{Timestamp: start.Add(f.at), CaptureLength: len(f.frame), Length: len(f.frame)}
		if err := w.WritePacket(ci, f.frame); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "c.pcap")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

var suggestServer = netip.MustParseAddr("192.0.2.10")

// traffic is rate frames a second to port from second from to second to,
// each from mk with a random source.
func traffic(r *rand.Rand, port uint16, rate int, from, to time.Duration, mk func(*pktgen.Frame)) []timedFrame {
	var out []timedFrame
	n := int((to - from).Seconds() * float64(rate))
	for i := range n {
		f := pktgen.Frame{Src: netip.AddrFrom4([4]byte{10, byte(r.IntN(256)), byte(r.IntN(256)), byte(1 + r.IntN(254))}),
			Dst: suggestServer, SrcPort: uint16(1024 + r.IntN(60000)), DstPort: port, TTL: uint8(40 + r.IntN(25))}
		mk(&f)
		out = append(out, timedFrame{from + time.Duration(i)*(to-from)/time.Duration(n), f.MustBuild()})
	}
	return out
}

func dnsQuery(r *rand.Rand, name string) []byte {
	q := []byte{byte(r.Uint32()), byte(r.Uint32()), 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, byte(len(name))}
	return append(append(q, name...), 0, 0, 1, 0, 1)
}

// Two floods in ten seconds of normal traffic: UDP to port 9000 in a TTL
// and a length band, and DNS queries for one name, which a rule holds by
// its payload bytes (the IP ID it also shares is left out). A capture of
// the normal traffic alone has no flood.
func TestPolicySuggest(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	normalUDP := func(f *pktgen.Frame) { f.Payload = 20 + r.IntN(300) }
	normalDNS := func(f *pktgen.Frame) {
		f.Data = dnsQuery(r, []string{"www", "mail", "api", "cdn"}[r.IntN(4)]+"example")
	}
	normal := append(traffic(r, 9000, 100, 0, 10*time.Second, normalUDP), traffic(r, 53, 100, 0, 10*time.Second, normalDNS)...)
	floods := append(slices.Clone(normal),
		traffic(r, 9000, 3000, 3*time.Second, 5*time.Second, func(f *pktgen.Frame) {
			f.TTL, f.Payload = uint8(100+r.IntN(11)), 1172+r.IntN(11)
		})...)
	floods = append(floods, traffic(r, 53, 3000, 6*time.Second, 8*time.Second, func(f *pktgen.Frame) {
		f.Data = dnsQuery(r, "x5kq9zqwer") // as long as the normal names
	})...)

	out := suggest(t, floods,
		"flood 1: udp 192.0.2.10 port 53, 00:00:06 to 00:00:08",
		"payload[2..15] 010000010000000000000a78356b",
		`payload: [{offset: 2, bytes: "010000010000000000000a78356b"}]`,
		"flood 2: udp 192.0.2.10 port 9000, 00:00:03 to 00:00:05",
		"ttl 100-110, length 1200-1210")
	rules := regexp.MustCompile(`(?m)^rules:\n(?:  .*\n)+`).FindAllString(out, -1)
	if len(rules) != 2 {
		t.Errorf("%d rules suggested, want 2", len(rules))
	}
	for _, rule := range rules {
		if _, err := policy.Parse("suggested.yaml", []byte(rule)); err != nil {
			t.Errorf("the suggested rule does not parse: %v\n%s", err, rule)
		}
	}

	out, _, code := runCLI("policy", "suggest", "--pcap", writeTimedCapture(t, normal))
	if code != 0 || !strings.HasPrefix(out, "no flood in ") {
		t.Errorf("normal traffic alone: exit %d, %q", code, out)
	}
	runCases(t, []cliCase{
		refused("no capture", "--pcap is required", "policy", "suggest"),
		refused("coverage", "--coverage 2 and --baseline-max 0.001: give shares between 0 and 1",
			"policy", "suggest", "--pcap", "x", "--coverage", "2"),
	})
}

// A flood eleven times its destination's normal rate: a tenth of its
// seconds' packets are normal traffic, which its fingerprint must not be
// asked to cover (95% of every packet would leave it without one).
func TestPolicySuggestNormalAmongTheFlood(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	frames := append(traffic(r, 9000, 200, 0, 10*time.Second, func(f *pktgen.Frame) { f.Payload = 20 + r.IntN(300) }),
		traffic(r, 9000, 2000, 3*time.Second, 6*time.Second, func(f *pktgen.Frame) {
			f.TTL, f.Payload = uint8(100+r.IntN(11)), 1172+r.IntN(11)
		})...)
	suggest(t, frames,
		"flood 1: udp 192.0.2.10 port 9000, 00:00:03 to 00:00:06, 2200 packets/s (normal 200.0/s)",
		"ttl 100-110, length 1200-1210",
		"(100.0% of 6600 attack samples, 0.00% of 1400 baseline samples)",
		"rules:")
}

// suggest runs policy suggest on a capture of frames and checks that its
// output holds each of want.
func suggest(t *testing.T, frames []timedFrame, want ...string) string {
	t.Helper()
	out, errOut, code := runCLI("policy", "suggest", "--pcap", writeTimedCapture(t, frames))
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, out, errOut)
	}
	t.Log(out)
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q", w)
		}
	}
	return out
}
