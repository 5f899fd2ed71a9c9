// SPDX-License-Identifier: Apache-2.0

package evasion

import (
	"encoding/binary"
	"net/netip"
)

// Parse is what a parser makes of a frame: the fields the limiter judges
// by, or why it could not judge it.
type Parse struct {
	NonIP    bool // a well-formed frame of another ethertype
	Unparsed int  // the maps.UnparsedKind the stack would drop it for, or -1
	Family   uint8
	Proto    uint8
	Ports    int // 0 none, 1 known, 2 unknown (a fragment, or a chain too long)
	Sport    uint16
	Dport    uint16
	TCPFlags uint8
	VLAN     int // outer VID, or -1
	Src      netip.Addr
	Long     bool // more extension headers than the bound
	// Payload is where the transport payload starts in the frame, and
	// PayloadLen its bytes within the IP packet (or the UDP datagram):
	// what payload matches read. Both 0 in a fragment.
	Payload, PayloadLen int
}

// Kinds of unparsed frames, as maps numbers them.
const (
	upTruncated = iota
	upBadLength
	upBadHeader
	upBadChecksum
	upVLANTags
)

// Bounds of the datapath's parser.
const (
	maxVLANTags = 1024 // 8 inline and 1016 in xdpl_vlan_walk
	maxIPv6Ext  = 32
)

// RefParse is the reference the BPF parser is fuzzed against, written from
// the kernel's receive path (ip_rcv_core, ipv6_rcv, the extension-header
// handlers, udp_rcv, tcp_v4_rcv) rather than from the C.
func RefParse(b []byte) Parse {
	p := Parse{Unparsed: -1, VLAN: -1}
	bad := func(kind int) Parse { return Parse{Unparsed: kind, VLAN: -1} }
	if len(b) < 14 {
		return bad(upTruncated)
	}
	off := 12
	et := binary.BigEndian.Uint16(b[off:])
	off += 2
	for tags := 0; et == 0x8100 || et == 0x88a8; tags++ {
		if tags == maxVLANTags {
			return bad(upVLANTags)
		}
		if len(b) < off+4 {
			return bad(upTruncated)
		}
		if tags == 0 {
			p.VLAN = int(binary.BigEndian.Uint16(b[off:]) & 0xfff)
		}
		et = binary.BigEndian.Uint16(b[off+2:])
		off += 4
	}
	var st l4state
	switch et {
	case 0x0800:
		st = p.ipv4(b, off)
	case 0x86dd:
		st = p.ipv6(b, off)
	default:
		return Parse{NonIP: true, Unparsed: -1, VLAN: p.VLAN}
	}
	if st.bad >= 0 {
		return bad(st.bad)
	}
	if k := p.transport(b, st); k >= 0 {
		return bad(k)
	}
	return p
}

// l4state is where the transport header starts and the IP packet ends.
type l4state struct {
	off, lim int
	frag     bool // any fragment: the transport header may be cut short
	bad      int
}

func (p *Parse) ipv4(b []byte, off int) l4state {
	st := l4state{bad: -1}
	if len(b) < off+20 {
		st.bad = upTruncated
		return st
	}
	h := b[off:]
	ihl := int(h[0]&0xf) * 4
	switch {
	case h[0]>>4 != 4 || ihl < 20:
		st.bad = upBadHeader
	case len(h) < ihl:
		st.bad = upTruncated
	case checksum(0, h[:ihl]) != 0:
		st.bad = upBadChecksum
	case int(binary.BigEndian.Uint16(h[2:])) > len(h):
		st.bad = upTruncated
	case int(binary.BigEndian.Uint16(h[2:])) < ihl:
		st.bad = upBadLength
	}
	if st.bad >= 0 {
		return st
	}
	p.Family, p.Proto = 4, h[9]
	p.Src = netip.AddrFrom4([4]byte(h[12:16]))
	fo := binary.BigEndian.Uint16(h[6:])
	st.frag = fo&0x3fff != 0
	if fo&0x1fff != 0 {
		p.Ports = 2
	}
	st.off, st.lim = off+ihl, off+int(binary.BigEndian.Uint16(h[2:]))
	return st
}

// isExt lists the headers walked as extension headers.
func isExt(nh uint8) bool {
	switch nh {
	case 0, 43, 44, 51, 60, 135, 139, 140, 253, 254:
		return true
	}
	return false
}

func (p *Parse) ipv6(b []byte, off int) l4state {
	st := l4state{bad: -1}
	if len(b) < off+40 {
		st.bad = upTruncated
		return st
	}
	h := b[off:]
	if h[0]>>4 != 6 {
		st.bad = upBadHeader
		return st
	}
	plen, nh := int(binary.BigEndian.Uint16(h[4:])), h[6]
	st.off, st.lim = off+40, len(b)
	if plen != 0 || nh != 0 { // else a jumbogram: the frame's length counts
		if st.off+plen > len(b) {
			st.bad = upTruncated
			return st
		}
		st.lim = st.off + plen
	}
	p.Family = 6
	p.Src = netip.AddrFrom16([16]byte(h[8:24]))
	for i := 0; ; i++ {
		if !isExt(nh) {
			break
		}
		if i == maxIPv6Ext {
			p.Long, p.Ports = true, 2
			break
		}
		if st.off+8 > st.lim {
			return p.cut(st, nh)
		}
		e := b[st.off:]
		size := (int(e[1]) + 1) * 8
		switch nh {
		case 51:
			size = (int(e[1]) + 2) * 4
		case 44:
			size = 8
			st.frag = true
		}
		first := nh != 44 || binary.BigEndian.Uint16(e[2:])&0xfff8 == 0
		nh = e[0]
		st.off += size
		if st.off > st.lim {
			return p.cut(st, nh)
		}
		if !first {
			p.Ports = 2
			break
		}
	}
	p.Proto = nh
	return st
}

// cut: an extension header runs past the packet. After a fragment header
// it may continue in the next fragment (judged as a fragment); else the
// stack drops it.
func (p *Parse) cut(st l4state, nh uint8) l4state {
	if !st.frag {
		st.bad = upTruncated
		return st
	}
	p.Proto, p.Ports = nh, 2
	return st
}

// transport reads the ports and checks the header as udp_rcv and
// tcp_v4_rcv do; returns an unparsed kind or -1.
func (p *Parse) transport(b []byte, st l4state) int {
	if p.Ports == 2 {
		return -1
	}
	need := map[uint8]int{6: 20, 17: 8, 136: 8, 132: 12}[p.Proto]
	if need == 0 {
		if !st.frag {
			hl := 0
			if p.Proto == 1 || p.Proto == 58 {
				hl = 8 // every ICMP message's first eight bytes
			}
			p.payload(min(st.off+hl, st.lim), st.lim)
		}
		return -1
	}
	if st.off+need > st.lim {
		if st.frag {
			p.Ports = 2
			return -1
		}
		return upTruncated
	}
	h := b[st.off:st.lim]
	p.Ports, p.Sport, p.Dport = 1, binary.BigEndian.Uint16(h), binary.BigEndian.Uint16(h[2:])
	if p.Proto == 6 {
		p.TCPFlags = h[13]
	}
	if st.frag {
		return -1
	}
	switch p.Proto {
	case 6:
		doff := int(h[12]>>4) * 4
		if doff < 20 {
			return upBadHeader
		}
		if doff > len(h) {
			return upTruncated
		}
		p.payload(st.off+doff, st.lim)
	case 17:
		ulen := int(binary.BigEndian.Uint16(h[4:]))
		if ulen == 0 && p.Family == 6 {
			ulen = len(h)
		}
		if ulen < 8 || ulen > len(h) {
			return upBadLength
		}
		p.payload(st.off+8, st.off+ulen) // udp_rcv trims the datagram to its length
	default:
		p.payload(st.off+need, st.lim)
	}
	return -1
}

// payload records the transport payload's place: from at to end.
func (p *Parse) payload(at, end int) {
	p.Payload, p.PayloadLen = at, end-at
}
