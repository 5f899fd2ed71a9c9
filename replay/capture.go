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
	Data   []byte
	// Time is the capture timestamp; zero for pcapng simple packet blocks,
	// which have none.
	Time time.Time
	// Length is the frame's length on the wire; more than len(Data) when
	// the capture's snap length cut it.
	Length int
}

// Capture reads the frames of a pcap or pcapng file.
type Capture struct {
	pcap   *pcapgo.Reader
	ng     *pcapgo.NgReader
	closer io.Closer
	n      int
}

// pcapng files start with a section header block, whose type reads the
// same in either byte order.
const ngSectionHeader = 0x0a0d0d0a

// OpenCapture reads a pcap (microsecond or nanosecond) or pcapng capture,
// either of them gzip-compressed or not, telling them apart by their magic
// numbers. Only Ethernet frames can be replayed: a capture of another link
// type is an error naming it.
func OpenCapture(r io.Reader) (*Capture, error) {
	br := bufio.NewReader(r)
	c := &Capture{}
	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return nil, err
		}
		c.closer = gz
		br = bufio.NewReader(gz)
	}
	magic, err := br.Peek(4)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty capture: not a pcap or pcapng file")
		}
		return nil, err
	}
	if binary.LittleEndian.Uint32(magic) == ngSectionHeader {
		// Mixed link types: each interface's is checked per frame.
		c.ng, err = pcapgo.NewNgReader(br, pcapgo.NgReaderOptions{WantMixedLinkType: true})
		if err != nil {
			return nil, fmt.Errorf("reading pcapng: %w", err)
		}
		return c, nil
	}
	c.pcap, err = pcapgo.NewReader(br)
	if err != nil {
		return nil, fmt.Errorf("not a pcap or pcapng capture: %w", err)
	}
	if lt := c.pcap.LinkType(); lt != layers.LinkTypeEthernet {
		return nil, linkTypeError(lt)
	}
	return c, nil
}

func linkTypeError(lt layers.LinkType) error {
	hint := ""
	if lt == layers.LinkTypeLinuxSLL || lt == layers.LinkTypeLinuxSLL2 {
		hint = " (tcpdump -i any writes this: capture on the interface itself, tcpdump -i eth0)"
	}
	return fmt.Errorf("link type %s (%d): only Ethernet captures can be replayed, as XDP sees Ethernet frames%s", lt, int(lt), hint)
}

// Next returns the next frame, or io.EOF after the last one.
func (c *Capture) Next() (Frame, error) {
	var data []byte
	var ci gopacket.CaptureInfo
	var err error
	if c.ng != nil {
		data, ci, err = c.ng.ReadPacketData()
	} else {
		data, ci, err = c.pcap.ReadPacketData()
	}
	if err != nil {
		if errors.Is(err, io.EOF) {
			return Frame{}, io.EOF
		}
		return Frame{}, fmt.Errorf("frame %d: %w", c.n+1, err)
	}
	c.n++
	if c.ng != nil && len(ci.AncillaryData) > 0 {
		if lt, ok := ci.AncillaryData[0].(layers.LinkType); ok && lt != layers.LinkTypeEthernet {
			return Frame{}, fmt.Errorf("frame %d (interface %d): %w", c.n, ci.InterfaceIndex, linkTypeError(lt))
		}
	}
	return Frame{Number: c.n, Data: data, Time: ci.Timestamp, Length: max(ci.Length, len(data))}, nil
}

// Close releases the decompressor, if any; the underlying reader is the
// caller's.
func (c *Capture) Close() error {
	if c.closer != nil {
		return c.closer.Close()
	}
	return nil
}
