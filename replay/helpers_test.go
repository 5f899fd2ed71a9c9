// SPDX-License-Identifier: Apache-2.0

package replay

import (
	"bytes"
	"compress/gzip"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/policy"
)

// Writing captures, replaying them and comparing reports: the replay tests'
// shared helpers.

// wallStart is the capture time of the first frame: a wall-clock time, as
// in a real capture, far from anything the datapath could hold directly.
var wallStart = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

// rec is one frame of a capture to write.
type rec struct {
	at   time.Duration // since the first frame
	data []byte
	wire int // on-the-wire length when the capture cut the frame; 0: len(data)
	// What the test expects to decide it: a rule (rule >= 0), or one of
	// the other outcomes.
	why  maps.Why
	rule int
	src  netip.Addr
	port uint16 // the key's port: destination for src_ip+dst_port, source for src_ip+src_port
}

type format int

const (
	pcapNanos format = iota
	pcapMicros
	pcapng
	pcapngGzip
)

func (f format) String() string {
	return [...]string{"pcap-ns", "pcap-us", "pcapng", "pcapng.gz"}[f]
}

// writeCapture writes frames, in the given order, to a new file.
func writeCapture(t *testing.T, f format, frames []rec) string {
	t.Helper()
	var buf bytes.Buffer
	var write func(ci gopacket.CaptureInfo, data []byte) error
	var flush func() error
	switch f {
	case pcapNanos, pcapMicros:
		w := pcapgo.NewWriterNanos(&buf)
		if f == pcapMicros {
			w = pcapgo.NewWriter(&buf)
		}
		if err := w.WriteFileHeader(65536, layers.LinkTypeEthernet); err != nil {
			t.Fatal(err)
		}
		write, flush = w.WritePacket, func() error { return nil }
	case pcapng, pcapngGzip:
		w, err := pcapgo.NewNgWriter(&buf, layers.LinkTypeEthernet)
		if err != nil {
			t.Fatal(err)
		}
		write, flush = w.WritePacket, w.Flush
	}
	for _, r := range frames {
		wire := r.wire
		if wire == 0 {
			wire = len(r.data)
		}
		ci := gopacket.CaptureInfo{Timestamp: wallStart.Add(r.at), CaptureLength: len(r.data), Length: wire}
		if err := write(ci, r.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := flush(); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	if f == pcapngGzip {
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		zw.Write(data)
		zw.Close()
		data = gz.Bytes()
	}
	path := filepath.Join(t.TempDir(), "capture."+f.String())
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func parsePolicy(t *testing.T, text string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse("test.yaml", []byte(text))
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	if len(p.Warnings) > 0 {
		t.Fatalf("policy warnings: %v", p.Warnings)
	}
	return p
}

// replayFile replays a capture file and fails the test on error.
func replayFile(t *testing.T, p *policy.Policy, path string, opts Options) *Report {
	t.Helper()
	testutil.RequireRoot(t)
	if opts.MaxSources == 0 {
		// Room for every key of the tests: no eviction, which the
		// models do not have.
		opts.MaxSources = 1 << 16
	}
	r, err := RunFile(p, path, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// compare checks the counts of a replay against the expected report.
func compare(t *testing.T, got, want *Report) {
	t.Helper()
	if got.Frames != want.Frames {
		t.Errorf("%d frames replayed, %d written", got.Frames, want.Frames)
	}
	for i := range want.Rules {
		g, w := got.Rules[i], want.Rules[i]
		if !reflect.DeepEqual(g, w) {
			t.Errorf("rule %s:\n got  %+v\n want %+v", w.Name, g, w)
		} else {
			t.Logf("rule %s: pass %d, drop %d, shadow %d, refused by level %v", w.Name, g.Pass.Packets, g.Drop.Packets, g.Shadow.Packets, g.Refused)
		}
	}
	for _, c := range []struct {
		name      string
		got, want Counts
	}{
		{"allow", got.Allow, want.Allow}, {"deny", got.Deny, want.Deny}, {"unmatched", got.Unmatched, want.Unmatched},
		{"malformed", got.Malformed, want.Malformed}, {"non-IP", got.NonIP, want.NonIP}, {"short", got.Short, want.Short},
	} {
		if c.got != c.want {
			t.Errorf("%s: got %+v, want %+v", c.name, c.got, c.want)
		}
	}
	if got.Truncated != want.Truncated {
		t.Errorf("%d truncated frames, want %d", got.Truncated, want.Truncated)
	}
	if !reflect.DeepEqual(got.Top, want.Top) {
		t.Errorf("top sources:\n got  %+v\n want %+v", got.Top, want.Top)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
