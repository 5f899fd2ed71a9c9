// SPDX-License-Identifier: Apache-2.0

package pktgen

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// Build serialises the frame: the link layer with its VLAN tags, the IP
// header with IPv4 options or IPv6 extension headers and fragment, the
// transport header (on a first fragment only) and the payload.
func (f Frame) Build() ([]byte, error) {
	if err := f.validate(); err != nil {
		return nil, err
	}
	src, dst := f.Src.Unmap(), f.Dst.Unmap()
	l4Proto := f.l4Proto(src.Is6())
	ls := f.linkLayers(src.Is6())
	var ip gopacket.NetworkLayer
	if src.Is4() {
		ip4 := f.ipv4(src, dst, l4Proto)
		ls = append(ls, ip4)
		ip = ip4
	} else {
		l3, ip6, err := f.ipv6(src, dst, l4Proto)
		if err != nil {
			return nil, err
		}
		ls = append(ls, l3...)
		ip = ip6
	}

	payload := f.Data
	if payload == nil {
		payload = make([]byte, f.Payload)
		for i := range payload {
			payload[i] = byte(i)
		}
	}
	if f.Frag == nil || f.Frag.Offset == 0 {
		l4, err := transport(f, l4Proto, ip)
		if err != nil {
			return nil, err
		}
		ls = append(ls, l4...)
	}
	ls = append(ls, gopacket.Payload(payload))

	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(buf, opts, ls...); err != nil {
		return nil, fmt.Errorf("pktgen: serialise: %w", err)
	}
	return buf.Bytes(), nil
}

// validate refuses a description no frame fits.
func (f Frame) validate() error {
	if !f.Src.IsValid() || !f.Dst.IsValid() {
		return errors.New("pktgen: frame needs Src and Dst")
	}
	src, dst := f.Src.Unmap(), f.Dst.Unmap()
	if src.Is4() != dst.Is4() {
		return fmt.Errorf("pktgen: Src %v and Dst %v are of different families", f.Src, f.Dst)
	}
	if f.Payload < 0 || f.IPv4Options < 0 || f.IPv4Options > 10 {
		return fmt.Errorf("pktgen: bad sizes (payload %d, options %d)", f.Payload, f.IPv4Options)
	}
	if f.Data != nil && f.Payload != 0 && f.Payload != len(f.Data) {
		return fmt.Errorf("pktgen: payload %d with %d bytes of data", f.Payload, len(f.Data))
	}
	if f.Frag != nil && f.Frag.Offset%8 != 0 {
		return fmt.Errorf("pktgen: fragment offset %d is not a multiple of 8", f.Frag.Offset)
	}
	if f.NoTCPFlags && f.TCPFlags != 0 {
		return fmt.Errorf("pktgen: NoTCPFlags with TCPFlags %#x", uint8(f.TCPFlags))
	}
	if src.Is4() && len(f.Ext) > 0 {
		return errors.New("pktgen: extension headers on an IPv4 frame")
	}
	return nil
}

// l4Proto is the IP protocol number the frame carries: UDP by default,
// ICMPv6 for ProtoICMP over IPv6.
func (f Frame) l4Proto(is6 bool) layers.IPProtocol {
	l4Proto := layers.IPProtocol(f.Proto)
	if f.Proto == 0 {
		l4Proto = layers.IPProtocolUDP
	}
	if f.Proto == ProtoICMP && is6 {
		l4Proto = layers.IPProtocolICMPv6
	}
	return l4Proto
}

func (f Frame) ttl() uint8 {
	if f.TTL == 0 {
		return 64
	}
	return f.TTL
}

// linkLayers are the Ethernet header and the VLAN tags, each naming the
// next one's type and the last the IP version's.
func (f Frame) linkLayers(is6 bool) []gopacket.SerializableLayer {
	srcMAC, dstMAC := f.SrcMAC, f.DstMAC
	if srcMAC == nil {
		srcMAC = DefaultSrcMAC
	}
	if dstMAC == nil {
		dstMAC = DefaultDstMAC
	}
	l3Type := layers.EthernetTypeIPv4
	if is6 {
		l3Type = layers.EthernetTypeIPv6
	}
	eth := &layers.Ethernet{SrcMAC: srcMAC, DstMAC: dstMAC, EthernetType: l3Type}
	ls := []gopacket.SerializableLayer{eth}
	next := &eth.EthernetType
	for _, v := range f.VLANs {
		tpid := layers.EthernetType(v.TPID)
		if tpid == 0 {
			tpid = layers.EthernetTypeDot1Q
		}
		*next = tpid
		tag := &layers.Dot1Q{Priority: v.Priority, VLANIdentifier: v.ID, Type: l3Type}
		ls = append(ls, tag)
		next = &tag.Type
	}
	return ls
}

// ipv4 is the IPv4 header with its NOP options and fragment fields.
func (f Frame) ipv4(src, dst netip.Addr, l4Proto layers.IPProtocol) *layers.IPv4 {
	ip4 := &layers.IPv4{
		Version: 4, TTL: f.ttl(), TOS: f.TOS, Protocol: l4Proto,
		SrcIP: src.AsSlice(), DstIP: dst.AsSlice(),
	}
	for i := 0; i < 4*f.IPv4Options; i++ { // NOP is one byte
		ip4.Options = append(ip4.Options, layers.IPv4Option{OptionType: 1, OptionLength: 1})
	}
	if f.Frag != nil {
		ip4.Id = uint16(f.Frag.ID)
		ip4.FragOffset = f.Frag.Offset / 8
		if f.Frag.More {
			ip4.Flags = layers.IPv4MoreFragments
		}
	}
	return ip4
}

// ipv6 is the IPv6 header and the extension headers after it (a
// hop-by-hop header rides in the IPv6 layer itself), the fragment header
// last, each naming the next.
func (f Frame) ipv6(src, dst netip.Addr, l4Proto layers.IPProtocol) ([]gopacket.SerializableLayer, *layers.IPv6, error) {
	ip6 := &layers.IPv6{
		Version: 6, HopLimit: f.ttl(), TrafficClass: f.TOS,
		SrcIP: src.AsSlice(), DstIP: dst.AsSlice(),
	}
	ls := []gopacket.SerializableLayer{ip6}
	nextHdr := &ip6.NextHeader
	padN := func() []*layers.IPv6HopByHopOption {
		// One PadN option filling the header to 8 bytes: gopacket
		// pads an empty option list to 4 bytes, an invalid length.
		return []*layers.IPv6HopByHopOption{{OptionType: 1, OptionLength: 4, OptionData: make([]byte, 4)}}
	}
	for i, e := range f.Ext {
		*nextHdr = layers.IPProtocol(e)
		switch e {
		case ExtHopByHop:
			if i != 0 {
				return nil, nil, errors.New("pktgen: hop-by-hop must be the first extension header")
			}
			h := &layers.IPv6HopByHop{Options: padN()}
			ip6.HopByHop = h // IPv6.SerializeTo writes it
			nextHdr = &h.NextHeader
		case ExtDestOpts:
			opts := padN()
			h := &layers.IPv6Destination{Options: []*layers.IPv6DestinationOption{(*layers.IPv6DestinationOption)(opts[0])}}
			ls = append(ls, h)
			nextHdr = &h.NextHeader
		case ExtRouting:
			h := &layers.IPv6Routing{Reserved: make([]byte, 4)}
			ls = append(ls, h)
			nextHdr = &h.NextHeader
		default:
			return nil, nil, fmt.Errorf("pktgen: unsupported extension header %d", e)
		}
	}
	if f.Frag != nil {
		*nextHdr = layers.IPProtocolIPv6Fragment
		h := &layers.IPv6Fragment{
			FragmentOffset: f.Frag.Offset / 8,
			MoreFragments:  f.Frag.More,
			Identification: f.Frag.ID,
		}
		ls = append(ls, h)
		nextHdr = &h.NextHeader
	}
	*nextHdr = l4Proto
	return ls, ip6, nil
}

// transport is the transport header: UDP, TCP with its flags and options,
// or an ICMP message (an echo request unless ICMP says otherwise).
func transport(f Frame, proto layers.IPProtocol, ip gopacket.NetworkLayer) ([]gopacket.SerializableLayer, error) {
	switch proto {
	case layers.IPProtocolUDP:
		udp := &layers.UDP{SrcPort: layers.UDPPort(f.SrcPort), DstPort: layers.UDPPort(f.DstPort)}
		if err := udp.SetNetworkLayerForChecksum(ip); err != nil {
			return nil, err
		}
		return []gopacket.SerializableLayer{udp}, nil
	case layers.IPProtocolTCP:
		flags := f.TCPFlags
		if flags == 0 && !f.NoTCPFlags {
			flags = TCPSyn
		}
		tcp := &layers.TCP{
			SrcPort: layers.TCPPort(f.SrcPort), DstPort: layers.TCPPort(f.DstPort),
			Seq: max(f.TCPSeq, 1), Window: 65535,
			FIN: flags&TCPFin != 0, SYN: flags&TCPSyn != 0, RST: flags&TCPRst != 0,
			PSH: flags&TCPPsh != 0, ACK: flags&TCPAck != 0, URG: flags&TCPUrg != 0,
			ECE: flags&TCPEce != 0, CWR: flags&TCPCwr != 0,
		}
		if tcp.ACK {
			tcp.Ack = max(f.TCPAck, 1)
		}
		for _, o := range f.TCPOptions {
			opt := layers.TCPOption{OptionType: layers.TCPOptionKind(o.Kind), OptionData: o.Data}
			if o.Kind > 1 {
				opt.OptionLength = uint8(2 + len(o.Data))
			} else {
				opt.OptionLength = 1
			}
			tcp.Options = append(tcp.Options, opt)
		}
		if err := tcp.SetNetworkLayerForChecksum(ip); err != nil {
			return nil, err
		}
		return []gopacket.SerializableLayer{tcp}, nil
	case layers.IPProtocolICMPv4:
		return []gopacket.SerializableLayer{&layers.ICMPv4{
			TypeCode: f.icmpTypeCode(layers.ICMPv4TypeEchoRequest),
			Id:       f.SrcPort, Seq: 1,
		}}, nil
	case layers.IPProtocolICMPv6:
		icmp := &layers.ICMPv6{TypeCode: layers.ICMPv6TypeCode(f.icmpTypeCode(layers.ICMPv6TypeEchoRequest))}
		if err := icmp.SetNetworkLayerForChecksum(ip); err != nil {
			return nil, err
		}
		return []gopacket.SerializableLayer{icmp, &layers.ICMPv6Echo{Identifier: f.SrcPort, SeqNumber: 1}}, nil
	}
	return nil, fmt.Errorf("pktgen: unsupported protocol %d", proto)
}

// icmpTypeCode is the frame's ICMP type and code, or an echo request.
func (f Frame) icmpTypeCode(echo uint8) layers.ICMPv4TypeCode {
	if f.ICMP == nil {
		return layers.CreateICMPv4TypeCode(echo, 0)
	}
	return layers.CreateICMPv4TypeCode(f.ICMP.Type, f.ICMP.Code)
}
