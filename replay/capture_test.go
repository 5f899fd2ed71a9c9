package replay

import (
	"bytes"
	"errors"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/xdplimit/xdplimit/pktgen"
)

// readAll reads every frame of a capture held in memory.
func readAll(data []byte) ([]Frame, error) {
	c, err := OpenCapture(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var out []Frame
	for {
		f, err := c.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, f)
	}
}

func TestCaptureFormats(t *testing.T) {
	frame := pktgen.UDP4(netip.MustParseAddr("192.0.2.1"), dst4, 1, 2, 18)
	for _, f := range []format{pcapNanos, pcapMicros, pcapng, pcapngGzip} {
		t.Run(f.String(), func(t *testing.T) {
			data := readFile(t, writeCapture(t, f, []rec{
				{at: 0, data: frame},
				{at: 1500 * time.Microsecond, data: frame[:40], wire: len(frame)},
			}))
			got, err := readAll(data)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 2 {
				t.Fatalf("%d frames", len(got))
			}
			if got[0].Number != 1 || got[1].Number != 2 {
				t.Errorf("numbered %d, %d", got[0].Number, got[1].Number)
			}
			if !got[0].Time.Equal(wallStart) || got[1].Time.Sub(got[0].Time) != 1500*time.Microsecond {
				t.Errorf("timestamps %v, %v", got[0].Time, got[1].Time)
			}
			if !bytes.Equal(got[0].Data, frame) || len(got[1].Data) != 40 || got[1].Length != len(frame) {
				t.Errorf("frame data or lengths wrong: %d/%d, %d/%d", len(got[0].Data), got[0].Length, len(got[1].Data), got[1].Length)
			}
		})
	}
}

func TestCaptureLinkTypes(t *testing.T) {
	frame := pktgen.UDP4(netip.MustParseAddr("192.0.2.1"), dst4, 1, 2, 18)
	ci := gopacket.CaptureInfo{Timestamp: wallStart, CaptureLength: len(frame), Length: len(frame)}

	// A pcap of tcpdump -i any: refused when opened.
	var buf bytes.Buffer
	w := pcapgo.NewWriter(&buf)
	if err := w.WriteFileHeader(65536, layers.LinkTypeLinuxSLL); err != nil {
		t.Fatal(err)
	}
	if _, err := readAll(buf.Bytes()); err == nil || !strings.Contains(err.Error(), "link type Linux SLL (113)") ||
		!strings.Contains(err.Error(), "only Ethernet") {
		t.Errorf("Linux SLL pcap: %v", err)
	}

	// A pcapng whose second interface is not Ethernet: refused at its
	// first frame, naming it.
	buf.Reset()
	ng, err := pcapgo.NewNgWriter(&buf, layers.LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := ng.AddInterface(pcapgo.NgInterface{Name: "tun0", LinkType: layers.LinkTypeRaw, TimestampResolution: 9})
	if err != nil {
		t.Fatal(err)
	}
	if err := ng.WritePacket(ci, frame); err != nil {
		t.Fatal(err)
	}
	ci.InterfaceIndex, ci.CaptureLength, ci.Length = raw, len(frame)-14, len(frame)-14
	if err := ng.WritePacket(ci, frame[14:]); err != nil {
		t.Fatal(err)
	}
	if err := ng.Flush(); err != nil {
		t.Fatal(err)
	}
	got, err := readAll(buf.Bytes())
	if len(got) != 1 || err == nil || !strings.Contains(err.Error(), "frame 2 (interface 1): link type Raw") {
		t.Errorf("mixed pcapng: %d frames, %v", len(got), err)
	}
}

func TestCaptureNotACapture(t *testing.T) {
	for name, data := range map[string][]byte{
		"empty":  nil,
		"text":   []byte("rules: []\n"),
		"binary": bytes.Repeat([]byte{0xde, 0xad, 0xbe, 0xef}, 10),
	} {
		if _, err := readAll(data); err == nil {
			t.Errorf("%s: read as a capture", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}
