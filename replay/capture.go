// SPDX-License-Identifier: Apache-2.0

package replay

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// Frame is one captured frame.
type Frame struct {
	Number int // 1-based position in the capture, as Wireshark numbers frames
	// Data is an Ethernet frame: as captured, or behind a synthesised
	// Ethernet header (NoLinkLayer). Shorter than an Ethernet header when
	// the capture cut it so.
	Data []byte
	// Time is the capture timestamp; zero for pcapng simple packet blocks,
	// which have none.
	Time time.Time
	// Length is the frame's length on the wire; more than len(Data) when
	// the capture's snap length cut it.
	Length int
	// NoLinkLayer: captured without an Ethernet header (Linux cooked
	// capture, raw IP); Data starts with one made up from the capture's
	// protocol field or the IP version.
	NoLinkLayer bool
	// Outgoing: sent by the capturing host (a Linux cooked capture's
	// packet type, a pcapng packet's direction flag).
	Outgoing bool
}

// Capture reads the frames of a pcap or pcapng file.
type Capture struct {
	pcap   *pcapgo.Reader
	ng     *pcapgo.NgReader
	closer io.Closer
	n      int
	// The readers read from br, which reads from in: what in counted less
	// what br holds is where in the (decompressed) capture they are, for
	// the warning about a capture cut short.
	in         *countingReader
	br         *bufio.Reader
	compressed bool
}

// pcapng files start with a section header block, whose type reads the
// same in either byte order.
const ngSectionHeader = 0x0a0d0d0a

// OpenCapture reads a pcap (microsecond or nanosecond) or pcapng capture,
// either of them gzip-compressed or not, telling them apart by their magic
// numbers. Frames of Ethernet, Linux cooked (SLL, SLL2) and raw IP link
// types can be replayed; another link type is an error naming it, when the
// file is opened (pcap) or at the first frame of such an interface (pcapng).
func OpenCapture(r io.Reader) (*Capture, error) {
	c := &Capture{in: &countingReader{r: r}}
	// pcapgo's readers take a *bufio.Reader as it is (bufio.NewReader
	// returns one that is large enough unchanged), so br's position is
	// theirs.
	c.br = bufio.NewReader(c.in)
	if magic, err := c.br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(c.br)
		if err != nil {
			return nil, err
		}
		c.closer, c.compressed = gz, true
		c.in = &countingReader{r: gz}
		c.br = bufio.NewReader(c.in)
	}
	magic, err := c.br.Peek(4)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty capture: not a pcap or pcapng file")
		}
		return nil, err
	}
	if binary.LittleEndian.Uint32(magic) == ngSectionHeader {
		// Mixed link types: each interface's is taken per frame.
		c.ng, err = pcapgo.NewNgReader(c.br, pcapgo.NgReaderOptions{WantMixedLinkType: true})
		if err != nil {
			return nil, fmt.Errorf("reading pcapng: %w", err)
		}
		return c, nil
	}
	c.pcap, err = pcapgo.NewReader(c.br)
	if err != nil {
		return nil, fmt.Errorf("not a pcap or pcapng capture: %w", err)
	}
	if _, err := toEthernet(c.pcap.LinkType(), nil, 0); err != nil { // the link type is known
		return nil, err
	}
	return c, nil
}

// CutOff is the error Next returns when the capture ends inside a record,
// as a capture stopped while it was being written does (a killed tcpdump):
// the frames before it are whole.
type CutOff struct {
	Frame int // the frame whose record is cut
	// Offset is where that record starts and End where the capture ends,
	// in bytes from the start of the file, or of the decompressed data of
	// a compressed one.
	Offset, End int64
	Compressed  bool
}

func (c *CutOff) Error() string {
	of := ""
	if c.Compressed {
		of = " of the decompressed capture"
	}
	where := fmt.Sprintf("at byte %d%s, inside the record of frame %d, which starts at byte %d", c.End, of, c.Frame, c.Offset)
	if c.End == c.Offset {
		where = fmt.Sprintf("at byte %d%s, where the record of frame %d would start", c.End, of, c.Frame)
	}
	return fmt.Sprintf("the capture is cut short %s (as a capture stopped while writing, a killed tcpdump, leaves it): replayed the %d %s before it",
		where, c.Frame-1, plural(c.Frame-1, "frame"))
}

// Next returns the next frame; io.EOF after the last one; a *CutOff when
// the capture ends inside the next frame's record.
func (c *Capture) Next() (Frame, error) {
	var data []byte
	var ci gopacket.CaptureInfo
	var err error
	start := c.pos()
	lt, outbound := layers.LinkTypeEthernet, false
	if c.ng != nil {
		var opts pcapgo.NgPacketOptions
		data, ci, opts, err = c.ng.ReadPacketDataWithOptions()
		if len(ci.AncillaryData) > 0 {
			lt, _ = ci.AncillaryData[0].(layers.LinkType)
		}
		outbound = opts.Flags != nil && opts.Flags.Direction == pcapgo.NgEpbFlagDirectionOutbound
	} else {
		data, ci, err = c.pcap.ReadPacketData()
		lt = c.pcap.LinkType()
	}
	if err != nil {
		if errors.Is(err, io.EOF) {
			return Frame{}, io.EOF
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return Frame{}, &CutOff{Frame: c.n + 1, Offset: start, End: c.pos(), Compressed: c.compressed}
		}
		return Frame{}, fmt.Errorf("frame %d: %w", c.n+1, err)
	}
	c.n++
	lf, err := toEthernet(lt, data, ci.Length)
	if err != nil {
		return Frame{}, fmt.Errorf("frame %d (interface %d): %w", c.n, ci.InterfaceIndex, err)
	}
	return Frame{Number: c.n, Data: lf.data, Time: ci.Timestamp, Length: max(lf.wire, len(lf.data)),
		NoLinkLayer: lf.noL2, Outgoing: lf.outgoing || outbound}, nil
}

// pos is how many bytes of the (decompressed) capture the readers took.
func (c *Capture) pos() int64 { return c.in.n - int64(c.br.Buffered()) }

// Close releases the decompressor, if any; the underlying reader is the
// caller's.
func (c *Capture) Close() error {
	if c.closer != nil {
		return c.closer.Close()
	}
	return nil
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
