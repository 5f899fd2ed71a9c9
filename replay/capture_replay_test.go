// SPDX-License-Identifier: Apache-2.0

package replay

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/xdplimit/xdplimit/pktgen"
)

// What the report makes of untimed, cut and outgoing frames.

const dnsPerSecond = `
rules:
  - name: dns
    match: {protocol: udp, dst_ports: [53]}
    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}
`

// A pcapng opening with simple packet blocks, which carry no timestamp,
// then mixing them with enhanced ones: the untimed frames run at the first
// stamped frame's time, or the previous frame's, and the clock starts at
// zero. A clock started from the zero timestamp would run the stamped
// frames at +9223372036 s, where the buckets' arithmetic no longer holds.
func TestReplaySimplePacketBlocks(t *testing.T) {
	p := parsePolicy(t, dnsPerSecond)
	frame := pktgen.UDP4(src4, dst4, 4000, 53, 18)
	data := ngHeader()
	for _, b := range [][]byte{ngSPB(frame), ngSPB(frame), ngEPB(wallStart, frame), ngSPB(frame), ngEPB(wallStart.Add(2*time.Second), frame)} {
		data = append(data, b...)
	}
	r := replayFile(t, p, writeBytes(t, "spb.pcapng", data), Options{Explain: []int{1, 3, 4, 5}})
	// Offsets 0, 0, 0, 0 and 2 s: the burst of 1, then one token 2 s on.
	if dns := r.Rules[0]; dns.Pass.Packets != 2 || dns.Drop.Packets != 3 {
		t.Errorf("dns: pass %d, drop %d; want 2, 3", dns.Pass.Packets, dns.Drop.Packets)
	}
	if !r.First.Equal(wallStart) || r.Last.Sub(r.First) != 2*time.Second || r.NoTime != 3 || r.Backwards != 0 {
		t.Errorf("first %v, span %v, %d untimed, %d backwards", r.First, r.Last.Sub(r.First), r.NoTime, r.Backwards)
	}
	for i, want := range []time.Duration{0, 0, 0, 2 * time.Second} {
		if e := r.Explained[i]; e.Offset != want {
			t.Errorf("frame %d at %v, want %v", e.Frame, e.Offset, want)
		}
	}
	var out bytes.Buffer
	if err := r.Write(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		": 5 frames over 2.000000000s",
		"note: 3 frames without a timestamp (pcapng simple packet blocks): each ran at the time of the frame before it, or of the first stamped frame",
		"frame 5 at +2.000000000s",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

// A capture cut inside its fifth frame (a killed tcpdump): the four frames
// before it are replayed and reported, with a warning naming the cut.
func TestReplayCutOff(t *testing.T) {
	p := parsePolicy(t, dnsPerSecond)
	frame := pktgen.UDP4(src4, dst4, 4000, 53, 18)
	var recs []rec
	for i := range 5 {
		recs = append(recs, rec{at: time.Duration(i) * time.Millisecond, data: frame})
	}
	data := readFile(t, writeCapture(t, pcapMicros, recs))
	path := writeBytes(t, "cut.pcap", data[:len(data)-20])
	r := replayFile(t, p, path, Options{})
	if r.Frames != 4 || r.Rules[0].Pass.Packets != 1 || r.Rules[0].Drop.Packets != 3 {
		t.Errorf("%d frames, dns %+v", r.Frames, r.Rules[0])
	}
	if c := r.CutOff; c == nil || c.Frame != 5 || c.Offset != 24+4*(16+60) || c.End != int64(len(data)-20) {
		t.Fatalf("cut %+v", c)
	}
	w := r.Warnings()
	if len(w) != 1 || !strings.HasPrefix(w[0], path+": the capture is cut short at byte 384, inside the record of frame 5, which starts at byte 328") {
		t.Errorf("warnings %q", w)
	}
	var out bytes.Buffer
	if err := r.Write(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), ": 4 frames over 0.003000000s, cut short in frame 5 at byte 384 (see the warning)") {
		t.Errorf("report:\n%s", out.String())
	}
}

// A pcapng packet flagged outbound (dumpcap writes the direction) is the
// capturing host's own: counted, not run.
func TestReplayOutboundFlag(t *testing.T) {
	p := parsePolicy(t, dnsPerSecond)
	frame := pktgen.UDP4(src4, dst4, 4000, 53, 18)
	var buf bytes.Buffer
	w, err := pcapgo.NewNgWriter(&buf, layers.LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	for i, dir := range []pcapgo.NgEpbFlag{pcapgo.NgEpbFlagDirectionInbound, pcapgo.NgEpbFlagDirectionOutbound, pcapgo.NgEpbFlagDirectionUnknown} {
		ci := gopacket.CaptureInfo{Timestamp: wallStart.Add(time.Duration(i) * time.Second * 2), CaptureLength: len(frame), Length: len(frame)}
		if err := w.WritePacketWithOptions(ci, frame, pcapgo.NgPacketOptions{Flags: &pcapgo.NgEpbFlags{Direction: dir}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	r := replayFile(t, p, writeBytes(t, "dir.pcapng", buf.Bytes()), Options{Explain: []int{2}})
	if r.Outgoing != (Counts{1, 60}) || r.Rules[0].Pass.Packets != 2 || r.NoLinkLayer != 0 {
		t.Errorf("outgoing %+v, dns %+v", r.Outgoing, r.Rules[0])
	}
	if e := r.Explained[0]; !e.Outgoing || !strings.HasPrefix(e.Text, "sent by the capturing host: not run") {
		t.Errorf("explanation %+v", e)
	}
}
