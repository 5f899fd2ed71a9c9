// SPDX-License-Identifier: Apache-2.0

// From a caller's frame to what xdpl_pktgen needs: the template with its
// source set to Sources.First, and the program's configuration (mode, offsets,
// checksum flags, header words). The checksum update here is the same RFC 1624
// one the BPF program applies per frame, so tests can predict its output.

package pktgen

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/xdplimit/xdplimit/gen"
)

// prepare copies the frame, sets its source to Sources.First, and derives
// the program's configuration from its layout.
func (g *Generator) prepare(frame []byte) ([]byte, gen.PktgenPktgenCfg, error) {
	var cfg gen.PktgenPktgenCfg
	l, err := parseLayout(frame)
	if err != nil {
		return nil, cfg, err
	}
	template := append([]byte(nil), frame...)
	s := g.sources
	first := l.src(template)
	if s.First.IsValid() {
		if s.First.Unmap().Is4() != l.is4 {
			return nil, cfg, fmt.Errorf("pktgen: source %v and frame family differ", s.First)
		}
		first = s.First.Unmap()
		setSource(template, l, first)
	}
	if s.DstPorts {
		return g.preparePorts(template, l)
	}
	if s.Mode == Sequential && uint64(s.Count)+uint64(low32(first)) > 1<<32 {
		return nil, cfg, fmt.Errorf("pktgen: %d sources from %v overflow 32 bits", s.Count, first)
	}
	if l.varyOff() > int(gen.PktgenPktgenLimitsPKTGEN_MAX_OFF) ||
		l.ipCsumOff > int(gen.PktgenPktgenLimitsPKTGEN_MAX_OFF) ||
		l.l4CsumOff > int(gen.PktgenPktgenLimitsPKTGEN_MAX_OFF) {
		return nil, cfg, fmt.Errorf("pktgen: headers longer than %d bytes", gen.PktgenPktgenLimitsPKTGEN_MAX_OFF)
	}
	cfg = gen.PktgenPktgenCfg{
		Mode:   uint32(s.Mode),
		Base:   low32(first),
		Count:  s.Count,
		Mask:   s.Mask,
		SrcOff: uint16(l.varyOff()),
	}
	if l.ipCsumOff >= 0 {
		cfg.Flags |= uint32(gen.PktgenPktgenFlagsPKTGEN_F_IP4CSUM)
		cfg.IpCsumOff = uint16(l.ipCsumOff)
	}
	fillTemplate(&cfg, template, l)
	return template, cfg, nil
}

// fillTemplate gives cfg the template's headers and its transport checksum.
// Every frame starts from the template's leading bytes (its headers):
// pages come back from the receiver possibly edited.
func fillTemplate(cfg *gen.PktgenPktgenCfg, template []byte, l layout) {
	words := min(len(template)/8, len(cfg.Hdr))
	for i := 0; i < words; i++ {
		cfg.Hdr[i] = binary.NativeEndian.Uint64(template[i*8:])
	}
	cfg.HdrWords = uint16(words)
	cfg.FrameLen = uint16(len(template))
	if l.l4CsumOff >= 0 {
		cfg.Flags |= uint32(gen.PktgenPktgenFlagsPKTGEN_F_L4CSUM)
		cfg.L4CsumOff = uint16(l.l4CsumOff)
		if l.udp {
			cfg.Flags |= uint32(gen.PktgenPktgenFlagsPKTGEN_F_L4UDP)
		}
	}
}

// preparePorts is prepare's configuration for Sources.DstPorts: the word
// varied is the ports', which the IPv4 header checksum does not cover (the
// transport checksum does, through the same RFC 1624 update).
func (g *Generator) preparePorts(template []byte, l layout) ([]byte, gen.PktgenPktgenCfg, error) {
	var cfg gen.PktgenPktgenCfg
	if l.l4Off < 0 || (l.proto != 6 && l.proto != 17) || len(template) < l.l4Off+4 {
		return nil, cfg, fmt.Errorf("pktgen: varying ports needs a TCP or UDP header")
	}
	if l.l4Off > int(gen.PktgenPktgenLimitsPKTGEN_MAX_OFF) || l.l4CsumOff > int(gen.PktgenPktgenLimitsPKTGEN_MAX_OFF) {
		return nil, cfg, fmt.Errorf("pktgen: headers longer than %d bytes", gen.PktgenPktgenLimitsPKTGEN_MAX_OFF)
	}
	s := g.sources
	base := binary.BigEndian.Uint32(template[l.l4Off:])
	if s.Mode == Sequential && uint64(s.Count)+uint64(base&0xffff) > 1<<16 {
		return nil, cfg, fmt.Errorf("pktgen: %d ports from %d overflow 16 bits", s.Count, base&0xffff)
	}
	cfg = gen.PktgenPktgenCfg{Mode: uint32(s.Mode), Base: base, Count: s.Count, Mask: s.Mask & 0xffff, SrcOff: uint16(l.l4Off)}
	fillTemplate(&cfg, template, l)
	return template, cfg, nil
}

func low32(a netip.Addr) uint32 {
	b := a.As16()
	return binary.BigEndian.Uint32(b[12:])
}

// setSource rewrites the whole source address and patches the checksums
// with the same RFC 1624 update the BPF program uses, one 32-bit word at a
// time.
func setSource(frame []byte, l layout, src netip.Addr) {
	n := 4
	if !l.is4 {
		n = 16
	}
	newb := src.AsSlice()
	for w := 0; w < n; w += 4 {
		off := l.srcOff + w
		old := binary.BigEndian.Uint32(frame[off:])
		nw := binary.BigEndian.Uint32(newb[w:])
		if old == nw {
			continue
		}
		binary.BigEndian.PutUint32(frame[off:], nw)
		if l.ipCsumOff >= 0 {
			c := binary.BigEndian.Uint16(frame[l.ipCsumOff:])
			binary.BigEndian.PutUint16(frame[l.ipCsumOff:], csumReplace4(c, old, nw))
		}
		if l.l4CsumOff >= 0 {
			c := binary.BigEndian.Uint16(frame[l.l4CsumOff:])
			if l.udp && l.is4 && c == 0 {
				continue // UDP over IPv4 without a checksum
			}
			c = csumReplace4(c, old, nw)
			if l.udp && c == 0 {
				c = 0xffff
			}
			binary.BigEndian.PutUint16(frame[l.l4CsumOff:], c)
		}
	}
}

// csumReplace4 is RFC 1624 eqn. 3, HC' = ~(~HC + ~m + m').
func csumReplace4(csum uint16, from, to uint32) uint16 {
	sum := uint32(^csum)
	sum += (^from & 0xffff) + (^from >> 16)
	sum += (to & 0xffff) + (to >> 16)
	sum = (sum & 0xffff) + (sum >> 16)
	sum = (sum & 0xffff) + (sum >> 16)
	return ^uint16(sum)
}
