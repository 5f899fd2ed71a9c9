// SPDX-License-Identifier: Apache-2.0

package evasion

import (
	"encoding/binary"
)

// IPv6 extension header types the generator chains.
const (
	extHop      = 0
	extRouting  = 43
	extFragment = 44
	extAH       = 51
	extDest     = 60
	extMobility = 135
)

func (g *Gen) src6() []byte {
	a := make([]byte, 16)
	binary.BigEndian.PutUint32(a, 0x20010db8)
	copy(a[4:], g.bytes(12))
	return a
}

// extTypes picks a chain: usually a few headers, sometimes dozens (beyond
// the parser's bound of 32), with hop-by-hop mostly first.
func (g *Gen) extTypes() []byte {
	n := 0
	switch {
	case g.chance(45):
	case g.chance(70):
		n = 1 + g.r.IntN(4)
	default:
		n = 5 + g.r.IntN(41)
	}
	out := make([]byte, n)
	// Clean chains (destination options and routing headers with valid
	// options) are what the stack delivers however long they are; wild
	// ones mix in headers it refuses.
	g.clean = g.chance(60)
	for i := range out {
		k := g.r.IntN(100)
		if g.clean {
			k %= 80
		}
		switch {
		case k < 50:
			out[i] = extDest
		case k < 80:
			out[i] = extRouting
		case k < 90:
			out[i] = extHop
		case k < 95:
			out[i] = extAH
		default:
			out[i] = extMobility
		}
	}
	if n > 0 && g.chance(50) {
		out[0] = extHop
	}
	return out
}

// options fills an options header's body the way the stack accepts
// (ip6_parse_tlv): options of unknown types whose type says "skip",
// padding runs of at most 7 bytes of zeros, at most 8 non-padding options.
// A wild chain now and then gets an option of any type instead.
func (g *Gen) options(b []byte) {
	unknown := 0
	for i := 0; i < len(b); {
		left := len(b) - i
		if left <= 7 && (unknown == 8 || g.chance(50)) {
			pad(b[i:])
			return
		}
		if left == 1 {
			pad(b[i:])
			return
		}
		l := g.r.IntN(min(left-2, 12) + 1)
		if unknown == 7 && left-2 <= 255 {
			l = left - 2 // the last one takes the rest
		}
		typ := 0x1e | byte(g.r.IntN(2))<<5 // experimental, "skip if unknown"
		if !g.clean && g.chance(5) {
			typ = byte(g.r.IntN(256))
		}
		b[i], b[i+1] = typ, byte(l)
		copy(b[i+2:i+2+l], g.bytes(l))
		i += 2 + l
		unknown++
		if p := g.r.IntN(min(7, len(b)-i) + 1); p > 0 {
			pad(b[i : i+p])
			i += p
		}
	}
}

// pad writes Pad1 or one PadN over b (zero contents, as the stack wants).
func pad(b []byte) {
	clear(b)
	if len(b) > 1 {
		b[0], b[1] = 1, byte(len(b)-2)
	}
}

// chain serialises headers of the given types, the last pointing at next.
func (g *Gen) chain(types []byte, next byte) []byte {
	var out []byte
	for i, t := range types {
		nh := next
		if i+1 < len(types) {
			nh = types[i+1]
		}
		var h []byte
		switch t {
		case extAH:
			h = make([]byte, 4*(2+g.r.IntN(4)))
			h[1] = byte(len(h)/4 - 2)
			copy(h[4:], g.bytes(len(h)-4))
		case extFragment:
			// An atomic fragment (offset 0, no more): reassembled at once.
			h = make([]byte, 8)
			binary.BigEndian.PutUint32(h[4:], g.r.Uint32())
		default:
			h = make([]byte, 8*(1+g.r.IntN(4)))
			h[1] = byte(len(h)/8 - 1)
			switch t {
			case extRouting, extMobility:
				copy(h[2:], g.bytes(len(h)-2))
				// Routing: segments left 0, a type the stack skips then
				// (segment routing and RPL are refused when disabled).
				h[2] = []byte{0, 253, 254}[g.r.IntN(3)]
				h[3] = 0
			default:
				g.options(h[2:])
			}
		}
		h[0] = nh
		out = append(out, h...)
	}
	return out
}

// ipv6 builds the packet behind a random extension-header chain,
// fragmented sometimes (the fragment header after the unfragmentable
// headers, more headers after it).
func (g *Gen) ipv6(proto byte, l4 []byte) [][]byte {
	src, dst := g.src6(), g.t.Dst6.AsSlice()
	setL4Checksum(l4, proto, src, dst)
	types := g.extTypes()
	if g.chance(3) {
		types = append(types, extFragment) // atomic fragment inside the chain
	}
	if len(l4) < 16 || !g.chance(15) {
		return [][]byte{g.ipv6Frame(src, dst, append(g.chain(types, proto), l4...), firstOr(types, proto))}
	}
	cut := g.r.IntN(len(types) + 1)
	unfrag, later := types[:cut], types[cut:]
	fragmentable := append(g.chain(later, proto), l4...)
	g.id++
	var frames [][]byte
	for _, fr := range g.fragments(len(fragmentable)) {
		fh := make([]byte, 8)
		fh[0] = firstOr(later, proto)
		fo := uint16(fr.off)
		if fr.more {
			fo |= 1
		}
		binary.BigEndian.PutUint16(fh[2:], fo)
		binary.BigEndian.PutUint32(fh[4:], g.id)
		body := append(g.chain(unfrag, extFragment), fh...)
		body = append(body, fragmentable[fr.off:fr.off+fr.len]...)
		frames = append(frames, g.ipv6Frame(src, dst, body, firstOr(unfrag, extFragment)))
	}
	return frames
}

func firstOr(types []byte, next byte) byte {
	if len(types) > 0 {
		return types[0]
	}
	return next
}

func (g *Gen) ipv6Frame(src, dst, body []byte, next byte) []byte {
	h := make([]byte, 40, 40+len(body))
	h[0] = 0x60
	binary.BigEndian.PutUint16(h[4:], uint16(len(body)))
	h[6], h[7] = next, 64
	copy(h[8:], src)
	copy(h[24:], dst)
	return append(h, body...)
}

// ether prepends the Ethernet header and VID-0 tags (priority tags, which
// the stack pops and delivers on the base device).
func (g *Gen) ether(l3 []byte, v6 bool, tags int) []byte {
	f := make([]byte, 0, 14+4*tags+len(l3))
	f = append(f, g.t.DstMAC...)
	f = append(f, g.t.SrcMAC...)
	for range tags {
		tpid := uint16(0x8100)
		if g.chance(50) {
			tpid = 0x88a8
		}
		f = binary.BigEndian.AppendUint16(f, tpid)
		f = binary.BigEndian.AppendUint16(f, uint16(g.r.IntN(8))<<13) // PCP only
	}
	et := uint16(0x0800)
	if v6 {
		et = 0x86dd
	}
	f = binary.BigEndian.AppendUint16(f, et)
	return append(f, l3...)
}

// damage changes one thing in a quarter of the frames.
func (g *Gen) damage(f []byte, v6 bool, tags int) []byte {
	if !g.chance(25) {
		return f
	}
	l3 := 14 + 4*tags
	fix4 := func() {
		if !v6 && len(f) >= l3+20 && g.chance(80) {
			ihl := int(f[l3]&0xf) * 4
			if ihl >= 20 && l3+ihl <= len(f) {
				binary.BigEndian.PutUint16(f[l3+10:], 0)
				binary.BigEndian.PutUint16(f[l3+10:], checksum(0, f[l3:l3+ihl]))
			}
		}
	}
	switch g.r.IntN(7) {
	case 0: // truncated anywhere
		return f[:g.r.IntN(len(f))]
	case 1: // padding after the IP packet: the stack trims it
		return append(f, g.bytes(1+g.r.IntN(40))...)
	case 2: // IP length field
		off, d := l3+2, 0
		if v6 {
			off = l3 + 4
		}
		if len(f) >= off+2 {
			d = g.r.IntN(65) - 32
			binary.BigEndian.PutUint16(f[off:], uint16(int(binary.BigEndian.Uint16(f[off:]))+d))
			fix4()
		}
	case 3: // IHL or version
		if len(f) > l3 {
			f[l3] ^= byte(1 + g.r.IntN(255))
			fix4()
		}
	case 4: // any byte of the headers
		if n := min(len(f), l3+80); n > 0 {
			f[g.r.IntN(n)] ^= byte(1 + g.r.IntN(255))
			fix4()
		}
	case 5: // IPv4 header checksum alone
		if !v6 && len(f) >= l3+12 {
			f[l3+10] ^= byte(1 + g.r.IntN(255))
		}
	case 6: // a UDP length field, where it would be without headers
		off := l3 + 20 + 4
		if v6 {
			off = l3 + 40 + 4
		}
		if len(f) >= off+2 {
			binary.BigEndian.PutUint16(f[off:], uint16(g.r.IntN(200)))
		}
	}
	return f
}
