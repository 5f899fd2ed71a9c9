// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/pktgen"
)

// writeCapture writes frames to a pcapng capture, 1 ms apart from
// 2024-01-01, and returns its path.
func writeCapture(t *testing.T, frames [][]byte) string {
	t.Helper()
	var buf bytes.Buffer
	w, err := pcapgo.NewNgWriter(&buf, layers.LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, f := range frames {
		ci := gopacket.CaptureInfo{Timestamp: start.Add(time.Duration(i) * time.Millisecond), CaptureLength: len(f), Length: len(f)}
		if err := w.WritePacket(ci, f); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "c.pcapng")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPolicyTestCommand wires flags to the replay: the engine itself is
// tested in package replay.
func TestPolicyTestCommand(t *testing.T) {
	testutil.RequireRoot(t)
	pol := writeFile(t, "p.yaml", goodPolicy)
	var frames [][]byte
	for i := 0; i < 10; i++ {
		src := netip.AddrFrom4([4]byte{192, 0, 2, byte(1 + i%2)})
		frames = append(frames, pktgen.UDP4(src, netip.MustParseAddr("10.0.0.1"), 4000, 53, 18))
	}
	capture := writeCapture(t, frames)

	out, errOut, code := runCLI("policy", "test", pol, "--pcap", capture, "--explain", "1,7", "--explain", "10", "--top", "1", "--max-sources", "4096")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	// Each source: 3 of its 5 packets pass (burst 3 within 10 ms).
	for _, want := range []string{
		"capture " + capture + ": 10 frames over 0.009000000s",
		"state table 4096 entries",
		"dns   6          360         4          240",
		"TOP SOURCES DROPPED  RULE  DROP PKTS",
		"192.0.2.1            dns   2",
		"frame 1 at +0.000000000s, 60 bytes, udp 192.0.2.1:4000 > 10.0.0.1:53\n  rule dns (#1, line 2), key src_ip 192.0.2.1/32: pass",
		"frame 7 at +0.006000000s",
		"frame 10 at +0.009000000s, 60 bytes, udp 192.0.2.2:4000 > 10.0.0.1:53\n  rule dns (#1, line 2), level 0 (own limit: token_bucket 1 pkt/s burst 3), key src_ip 192.0.2.2/32: drop",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "192.0.2.2            dns") {
		t.Errorf("--top 1 listed a second source:\n%s", out)
	}

	// What the limiter holds for a source at the end of the capture, in
	// text and in the JSON scripts read (docs/json.md).
	out, errOut, code = runCLI("policy", "test", pol, "--pcap", capture, "--source", "192.0.2.1")
	if want := "  rules it can match, in policy order; which one a packet meets first also depends on its protocol, dst_ports:\n" +
		"    dns (action drop)\n      level 0, key src_ip 192.0.2.1/32, token_bucket: 0 of 3 packets left, admitted again in 0.991s, " +
		"whole again in 2.991s\n"; code != 0 || !strings.Contains(out, "capture: source 192.0.2.1\n") || !strings.Contains(out, want) {
		t.Errorf("--source: exit %d, stderr %q, stdout:\n%s\nwant %q", code, errOut, out, want)
	}
	checkPolicyTestJSON(t, pol, capture)

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"policy", "test", pol}, "--pcap is required"},
		{[]string{"policy", "test", pol, "--pcap", capture, "--explain", "11"}, "--explain 11: the capture has 10 frames"},
		{[]string{"policy", "test", pol, "--pcap", capture, "--explain", "0"}, "frames are numbered from 1"},
		{[]string{"policy", "test", pol, "--pcap", pol}, "not a pcap or pcapng capture"},
		{[]string{"policy", "test", capture, "--pcap", capture}, "the policy has errors"},
	} {
		_, errOut, code := runCLI(c.args...)
		if code != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q, want an error with %q", c.args, code, errOut, c.want)
		}
	}
}

// checkPolicyTestJSON: policy test -o json with --source and --explain
// decodes to the report the text shows.
func checkPolicyTestJSON(t *testing.T, pol, capture string) {
	out, errOut, code := runCLI("policy", "test", pol, "--pcap", capture, "-o", "json", "--source", "192.0.2.1", "--explain", "10")
	if code != 0 {
		t.Fatalf("-o json: exit %d\n%s", code, errOut)
	}
	var j struct {
		Policy struct {
			Path string `json:"path"`
		} `json:"policy"`
		Frames int `json:"frames"`
		Rules  []struct {
			Rule           string            `json:"rule"`
			Pass           map[string]uint64 `json:"pass"`
			RefusedByLevel []uint64          `json:"refused_by_level"`
		} `json:"rules"`
		Explained []struct {
			Frame   int    `json:"frame"`
			Verdict string `json:"verdict"`
			Key     string `json:"key"`
		} `json:"explained"`
		Sources []struct {
			Interface string `json:"interface"`
			Rules     []struct {
				Levels []struct {
					Remaining *uint64 `json:"remaining"`
					Limit     uint64  `json:"limit"`
				} `json:"levels"`
			} `json:"rules"`
		} `json:"sources"`
	}
	if err := json.Unmarshal([]byte(out), &j); err != nil {
		t.Fatalf("-o json: %v\n%s", err, out)
	}
	if j.Policy.Path != pol || j.Frames != 10 || len(j.Rules) != 1 || j.Rules[0].Rule != "dns" || j.Rules[0].Pass["packets"] != 6 ||
		len(j.Rules[0].RefusedByLevel) != 1 || j.Rules[0].RefusedByLevel[0] != 4 ||
		len(j.Explained) != 1 || j.Explained[0].Verdict != "drop" || j.Explained[0].Key != "192.0.2.2" ||
		len(j.Sources) != 1 || j.Sources[0].Interface != "capture" || *j.Sources[0].Rules[0].Levels[0].Remaining != 0 ||
		j.Sources[0].Rules[0].Levels[0].Limit != 3 {
		t.Errorf("-o json decodes to %+v:\n%s", j, out)
	}
}

// TestPolicyTestRefuses: what policy test refuses before it loads a
// program, so without root.
func TestPolicyTestRefuses(t *testing.T) {
	good, _, bad := policyFiles(t)
	runCases(t, []cliCase{
		refused("no capture", "--pcap is required", "policy", "test", good),
		refused("negative top", "--top -1: give 0 or more", "policy", "test", good, "--pcap", "c.pcap", "--top", "-1"),
		refused("output", `--output "yaml": give text or json`, "policy", "test", good, "--pcap", "c.pcap", "-o", "yaml"),
		refused("source", `--source "192.0.2": not an IP address`, "policy", "test", good, "--pcap", "c.pcap", "--source", "192.0.2"),
		{name: "policy with errors", args: []string{"policy", "test", bad, "--pcap", "c.pcap"}, code: 1,
			stderr: badError(bad) + "\nxdplimit: " + bad + ": the policy has errors; see `xdplimit policy check`\n"},
		refused("no policy", "accepts 1 arg(s), received 0", "policy", "test", "--pcap", "c.pcap"),
	})
}

// A tcpdump -i any capture (Linux cooked SLL2) that a kill cut inside its
// last frame: replayed up to the cut, a warning on standard error, exit 0.
func TestPolicyTestCookedCutCapture(t *testing.T) {
	testutil.RequireRoot(t)
	pol := writeFile(t, "p.yaml", goodPolicy)
	var buf bytes.Buffer
	w := pcapgo.NewWriterNanos(&buf)
	if err := w.WriteFileHeader(262144, layers.LinkTypeLinuxSLL2); err != nil {
		t.Fatal(err)
	}
	start := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	ip := pktgen.UDP4(netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("10.0.0.1"), 4000, 53, 18)[14:]
	// SLL2: protocol IPv4, interface 2, ARPHRD_ETHER, packet for this host.
	sll2 := []byte{0x08, 0x00, 0, 0, 0, 0, 0, 2, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0}
	frame := append(sll2, ip...)
	for i := range 5 {
		ci := gopacket.CaptureInfo{Timestamp: start.Add(time.Duration(i) * time.Millisecond), CaptureLength: len(frame), Length: len(frame)}
		if err := w.WritePacket(ci, frame); err != nil {
			t.Fatal(err)
		}
	}
	capture := filepath.Join(t.TempDir(), "any.pcap")
	if err := os.WriteFile(capture, buf.Bytes()[:buf.Len()-10], 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runCLI("policy", "test", pol, "--pcap", capture)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	// Records of 16 + 66 bytes after a 24-byte header: frame 5's starts
	// at byte 352, and the file ends 10 bytes before its end, at 424.
	if want := "warning: " + capture + ": the capture is cut short at byte 424, inside the record of frame 5, which starts at byte 352"; !strings.Contains(errOut, want) {
		t.Errorf("stderr lacks %q:\n%s", want, errOut)
	}
	for _, want := range []string{
		": 4 frames over 0.003000000s, cut short in frame 5 at byte 424 (see the warning)",
		"dns   3          180         1          60",
		"note: 4 frames captured without an Ethernet header (Linux cooked capture, raw IP)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
