// SPDX-License-Identifier: Apache-2.0

package replay

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

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
	frame := pktgen.UDP4(src4, dst4, 1, 2, 18)
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

// pcapng blocks built by hand (little-endian), for what pcapgo's writer
// does not write: simple packet blocks.
func ngBlock(typ uint32, body []byte) []byte {
	body = append(body, make([]byte, (4-len(body)%4)%4)...)
	n := uint32(12 + len(body))
	le := binary.LittleEndian
	b := le.AppendUint32(le.AppendUint32(nil, typ), n)
	return le.AppendUint32(append(b, body...), n)
}

// ngHeader is a section header and one Ethernet interface with
// microsecond timestamps (the default resolution) and no snap length.
func ngHeader() []byte {
	le := binary.LittleEndian
	shb := le.AppendUint32(nil, 0x1a2b3c4d)
	shb = le.AppendUint16(le.AppendUint16(shb, 1), 0)
	shb = le.AppendUint64(shb, ^uint64(0)) // section length unknown
	idb := le.AppendUint16(le.AppendUint16(nil, uint16(layers.LinkTypeEthernet)), 0)
	idb = le.AppendUint32(idb, 0)
	return append(ngBlock(ngSectionHeader, shb), ngBlock(1, idb)...)
}

// ngEPB is an enhanced packet block on interface 0.
func ngEPB(ts time.Time, data []byte) []byte {
	le := binary.LittleEndian
	us := uint64(ts.UnixMicro())
	b := le.AppendUint32(nil, 0)
	b = le.AppendUint32(le.AppendUint32(b, uint32(us>>32)), uint32(us))
	b = le.AppendUint32(le.AppendUint32(b, uint32(len(data))), uint32(len(data)))
	return ngBlock(6, append(b, data...))
}

// ngSPB is a simple packet block: no timestamp, no interface.
func ngSPB(data []byte) []byte {
	return ngBlock(3, append(binary.LittleEndian.AppendUint32(nil, uint32(len(data))), data...))
}

// A pcapng that opens with simple packet blocks and mixes them with
// enhanced ones: the untimed frames carry no time, the stamped ones theirs.
func TestCaptureSimplePacketBlocks(t *testing.T) {
	frame := pktgen.UDP4(src4, dst4, 4000, 53, 18)
	data := ngHeader()
	for _, b := range [][]byte{ngSPB(frame), ngSPB(frame), ngEPB(wallStart, frame), ngSPB(frame), ngEPB(wallStart.Add(2*time.Second), frame)} {
		data = append(data, b...)
	}
	got, err := readAll(data)
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Time{{}, {}, wallStart, {}, wallStart.Add(2 * time.Second)}
	if len(got) != len(want) {
		t.Fatalf("%d frames", len(got))
	}
	for i, f := range got {
		if !f.Time.Equal(want[i]) || !bytes.Equal(f.Data, frame) {
			t.Errorf("frame %d: time %v, %d bytes; want %v", f.Number, f.Time, len(f.Data), want[i])
		}
	}
}

// A capture cut short: the frames before the cut are read, then a *CutOff
// names the cut frame, where its record starts and where the file ends.
func TestCaptureCutOff(t *testing.T) {
	frame := pktgen.UDP4(src4, dst4, 4000, 53, 18) // 60 bytes
	var recs []rec
	for i := range 5 {
		recs = append(recs, rec{at: time.Duration(i) * time.Millisecond, data: frame})
	}
	pcapData := readFile(t, writeCapture(t, pcapMicros, recs))
	ngData := readFile(t, writeCapture(t, pcapng, recs))
	const pcapRec = 16 + 60
	ngRec := (len(ngData) - len(readFile(t, writeCapture(t, pcapng, nil)))) / 5
	ngStart := len(ngData) - 5*ngRec
	gz := readFile(t, writeCapture(t, pcapngGzip, recs))
	for _, c := range []struct {
		name          string
		data          []byte
		frames        int
		offset, end   int64
		compressed    bool
		wantInMessage string
	}{
		{"pcap data", pcapData[:24+4*pcapRec+30], 4, 24 + 4*pcapRec, 24 + 4*pcapRec + 30, false,
			"the capture is cut short at byte 358, inside the record of frame 5, which starts at byte 328 (as a capture stopped while writing, a killed tcpdump, leaves it): replayed the 4 frames before it"},
		{"pcap record header", pcapData[:24+3*pcapRec+10], 3, 24 + 3*pcapRec, 24 + 3*pcapRec + 10, false, "frame 4"},
		{"pcapng block", ngData[:ngStart+2*ngRec+ngRec/2], 2, int64(ngStart + 2*ngRec), int64(ngStart + 2*ngRec + ngRec/2), false, "frame 3"},
		{"pcapng trailing length", ngData[:len(ngData)-2], 4, int64(ngStart + 4*ngRec), int64(len(ngData) - 2), false, "frame 5"},
		{"gzip stream", gz[:len(gz)*2/3], -1, -1, -1, true, "of the decompressed capture"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := readAll(c.data)
			var cut *CutOff
			if !errors.As(err, &cut) {
				t.Fatalf("%d frames, then %v; want a cut", len(got), err)
			}
			if c.frames >= 0 && (len(got) != c.frames || cut.Frame != c.frames+1 || cut.Offset != c.offset || cut.End != c.end) {
				t.Errorf("%d frames, cut %+v; want %d frames, cut in frame %d from byte %d to %d", len(got), *cut, c.frames, c.frames+1, c.offset, c.end)
			}
			if cut.Compressed != c.compressed || cut.Frame != len(got)+1 || !strings.Contains(cut.Error(), c.wantInMessage) {
				t.Errorf("%d frames, cut: %v", len(got), cut)
			}
			for i, f := range got {
				if !bytes.Equal(f.Data, frame) || f.Number != i+1 {
					t.Errorf("frame %d read wrong", f.Number)
				}
			}
		})
	}
}

// Captures are untrusted input: whatever the bytes, reading never panics,
// and every frame it returns is one the replay can take.
func FuzzCapture(f *testing.F) {
	frame := pktgen.UDP4(src4, dst4, 4000, 53, 18)
	f.Add(append(ngHeader(), append(ngSPB(frame), ngEPB(wallStart, frame)...)...))
	for _, lt := range []uint32{1, 12, 101, 113, 276} {
		le := binary.LittleEndian
		h := le.AppendUint32(nil, 0xa1b2c3d4)
		h = le.AppendUint16(le.AppendUint16(h, 2), 4)
		h = le.AppendUint32(le.AppendUint32(le.AppendUint32(le.AppendUint32(h, 0), 0), 65535), lt)
		rec := le.AppendUint32(le.AppendUint32(le.AppendUint32(le.AppendUint32(nil, 1), 0), uint32(len(frame))), uint32(len(frame)))
		f.Add(append(append(h, rec...), frame...))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		frames, err := readAll(data)
		for _, fr := range frames {
			if fr.Length < len(fr.Data) || (fr.NoLinkLayer && len(fr.Data) > 0 && len(fr.Data) < ethHeaderLen) {
				t.Fatalf("frame %d: %d bytes, %d on the wire, no link layer %v", fr.Number, len(fr.Data), fr.Length, fr.NoLinkLayer)
			}
		}
		var cut *CutOff
		if errors.As(err, &cut) && (cut.Frame != len(frames)+1 || cut.End < cut.Offset) {
			t.Fatalf("cut %+v after %d frames", *cut, len(frames))
		}
	})
}
