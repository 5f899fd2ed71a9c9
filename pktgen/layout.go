// SPDX-License-Identifier: Apache-2.0

package pktgen

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// layout is where xdpl_pktgen finds what it rewrites in a template. Go
// parses the template once, so the BPF program needs no parser and costs the
// same for any encapsulation.
type layout struct {
	is4    bool
	srcOff int // the full source address (4 or 16 bytes)
	// ipCsumOff is the IPv4 header checksum, -1 for IPv6.
	ipCsumOff int
	// l4CsumOff is the checksum covering the source through the
	// pseudo-header, -1 when there is none (ICMPv4, non-first fragment,
	// unknown protocol).
	l4CsumOff int
	udp       bool
	proto     uint8 // transport protocol, after IPv6 extension headers
	l4Off     int   // transport header, -1 in a non-first fragment
}

// src returns the template's source address.
func (l layout) src(frame []byte) netip.Addr {
	if l.is4 {
		return netip.AddrFrom4([4]byte(frame[l.srcOff : l.srcOff+4]))
	}
	return netip.AddrFrom16([16]byte(frame[l.srcOff : l.srcOff+16]))
}

// varyOff is the offset of the 32-bit word the generator rewrites: the
// whole IPv4 address, or the low 32 bits of an IPv6 one.
func (l layout) varyOff() int {
	if l.is4 {
		return l.srcOff
	}
	return l.srcOff + 12
}

var errShort = errors.New("pktgen: frame truncated")

func parseLayout(frame []byte) (layout, error) {
	l := layout{ipCsumOff: -1, l4CsumOff: -1, l4Off: -1}
	if len(frame) < 14 {
		return l, errShort
	}
	off := 12
	etype := binary.BigEndian.Uint16(frame[off:])
	off += 2
	for i := 0; etype == 0x8100 || etype == 0x88a8; i++ {
		if i == 8 || len(frame) < off+4 {
			return l, errShort
		}
		etype = binary.BigEndian.Uint16(frame[off+2:])
		off += 4
	}

	var proto uint8
	var first bool // the transport header is present
	switch etype {
	case 0x0800:
		if len(frame) < off+20 {
			return l, errShort
		}
		ihl := int(frame[off]&0x0f) * 4
		if frame[off]>>4 != 4 || ihl < 20 || len(frame) < off+ihl {
			return l, fmt.Errorf("pktgen: bad IPv4 header")
		}
		l.is4 = true
		l.srcOff = off + 12
		l.ipCsumOff = off + 10
		proto = frame[off+9]
		first = binary.BigEndian.Uint16(frame[off+6:])&0x1fff == 0
		off += ihl
	case 0x86dd:
		if len(frame) < off+40 {
			return l, errShort
		}
		l.srcOff = off + 8
		var err error
		if off, proto, first, err = skipIPv6Ext(frame, off+40, frame[off+6]); err != nil {
			return l, err
		}
	default:
		return l, fmt.Errorf("pktgen: ethertype %#04x is not IP", etype)
	}

	l.proto = proto
	if !first {
		return l, nil
	}
	l.l4Off = off
	switch {
	case proto == 17:
		l.udp = true
		l.l4CsumOff = off + 6
	case proto == 6:
		l.l4CsumOff = off + 16
	case proto == 58 && !l.is4:
		l.l4CsumOff = off + 2
	default:
		return l, nil // ICMPv4 and others: no pseudo-header
	}
	if len(frame) < l.l4CsumOff+2 {
		l.l4CsumOff = -1 // truncated: nothing to keep correct
	}
	return l, nil
}

// skipIPv6Ext walks the IPv6 extension headers from off, where a header
// of type proto starts, up to 8 of them, to the header after them: its
// offset and type, and whether the frame is a first fragment (or none).
func skipIPv6Ext(frame []byte, off int, proto uint8) (int, uint8, bool, error) {
	first := true
	for i := 0; ; i++ {
		switch proto {
		case 0, 43, 44, 60: // hop-by-hop, routing, fragment, destination options
			if i == 8 || len(frame) < off+8 {
				return off, proto, first, errShort
			}
			next := frame[off]
			if proto == 44 {
				first = binary.BigEndian.Uint16(frame[off+2:])&0xfff8 == 0
				off += 8
			} else {
				off += (int(frame[off+1]) + 1) * 8
			}
			proto = next
		default:
			return off, proto, first, nil
		}
	}
}
