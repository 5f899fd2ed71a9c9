// SPDX-License-Identifier: Apache-2.0

package replay

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/policy"
)

// parsed is what the report says about a frame, decoded in Go (gopacket)
// only for the frames it describes: the verdicts are the program's.
type parsed struct {
	src, dst     netip.Addr
	proto        string
	sport, dport uint16
	hasPorts     bool
	flags        string
	vlans        []uint16
	etherType    layers.EthernetType
	fragment     bool
	sig          signature
}

func parse(data []byte) parsed {
	var p parsed
	pkt := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.DecodeOptions{Lazy: true, NoCopy: true})
	for _, l := range pkt.Layers() {
		switch l := l.(type) {
		case *layers.Ethernet:
			p.etherType = l.EthernetType
		case *layers.Dot1Q:
			p.vlans = append(p.vlans, l.VLANIdentifier)
			p.etherType = l.Type
		case *layers.IPv4:
			p.src, _ = netip.AddrFromSlice(l.SrcIP.To4())
			p.dst, _ = netip.AddrFromSlice(l.DstIP.To4())
			p.proto = strings.ToLower(l.Protocol.String())
			p.sig.length, p.sig.ttl, p.sig.tos = int(l.Length), int(l.TTL), int(l.TOS)
			p.fragment = l.FragOffset != 0 || l.Flags&layers.IPv4MoreFragments != 0
		case *layers.IPv6:
			p.src, _ = netip.AddrFromSlice(l.SrcIP)
			p.dst, _ = netip.AddrFromSlice(l.DstIP)
			p.proto = strings.ToLower(l.NextHeader.String())
			p.sig.length, p.sig.ttl, p.sig.tos = 40+int(l.Length), int(l.HopLimit), int(l.TrafficClass)
		case *layers.IPv6Fragment:
			p.fragment = true
			p.proto = strings.ToLower(l.NextHeader.String())
		case *layers.UDP:
			p.proto, p.sport, p.dport, p.hasPorts = "udp", uint16(l.SrcPort), uint16(l.DstPort), true
			p.sig.payload, p.sig.payloadKnown = l.Payload, true
		case *layers.TCP:
			p.proto, p.sport, p.dport, p.hasPorts = "tcp", uint16(l.SrcPort), uint16(l.DstPort), true
			p.flags = tcpFlags(l)
			p.sig.payload, p.sig.payloadKnown = l.Payload, true
		case *layers.ICMPv4:
			p.proto = "icmp"
			p.sig.icmp, p.sig.icmpType, p.sig.icmpCode = true, l.TypeCode.Type(), l.TypeCode.Code()
			p.sig.payload, p.sig.payloadKnown = l.Payload, true
		case *layers.ICMPv6:
			p.proto = "icmpv6"
			p.sig.icmp, p.sig.icmpType, p.sig.icmpCode = true, l.TypeCode.Type(), l.TypeCode.Code()
			// gopacket's ICMPv6 header is 4 bytes; payload matches count
			// from the eighth, as for ICMP.
			if len(l.Payload) >= 4 {
				p.sig.payload, p.sig.payloadKnown = l.Payload[4:], true
			}
		}
	}
	if p.fragment {
		p.sig.payload, p.sig.payloadKnown = nil, false
	}
	return p
}

func tcpFlags(t *layers.TCP) string {
	var fs []string
	for _, f := range []struct {
		on   bool
		name string
	}{{t.FIN, "fin"}, {t.SYN, "syn"}, {t.RST, "rst"}, {t.PSH, "psh"}, {t.ACK, "ack"}, {t.URG, "urg"}, {t.ECE, "ece"}, {t.CWR, "cwr"}} {
		if f.on {
			fs = append(fs, f.name)
		}
	}
	return strings.Join(fs, ",")
}

// sourceOf is a frame's source address; invalid when it has none.
func sourceOf(data []byte) netip.Addr { return parse(data).src }

func (p parsed) String() string {
	var b strings.Builder
	for _, v := range p.vlans {
		fmt.Fprintf(&b, "vlan %d ", v)
	}
	if !p.src.IsValid() {
		fmt.Fprintf(&b, "ethertype 0x%04x (%s)", uint16(p.etherType), p.etherType)
		return b.String()
	}
	b.WriteString(p.proto)
	if p.hasPorts {
		fmt.Fprintf(&b, " %s > %s", netip.AddrPortFrom(p.src, p.sport), netip.AddrPortFrom(p.dst, p.dport))
	} else {
		fmt.Fprintf(&b, " %s > %s", p.src, p.dst)
	}
	if p.flags != "" {
		fmt.Fprintf(&b, " [%s]", p.flags)
	}
	if p.fragment {
		b.WriteString(" fragment")
	}
	return b.String()
}

func explainFrame(p *policy.Policy, f Frame, off time.Duration, seen int, d maps.Decision) Explanation {
	pk := parse(f.Data)
	return Explanation{Frame: f.Number, Offset: off, Len: seen, Packet: pk.String(), Decision: d, Text: explainDecision(p, pk, d)}
}

func explainDecision(p *policy.Policy, pk parsed, d maps.Decision) string {
	verdict := map[maps.Verdict]string{
		maps.VerdictPass: "pass", maps.VerdictDrop: "drop", maps.VerdictShadow: "shadow-drop (counted as a drop, passed)",
		maps.VerdictCookie: "answered with a SYN-ACK carrying a SYN cookie (the SYN goes no further)",
		maps.VerdictReject: "answered with a TCP reset or an ICMP error (the packet goes no further)",
	}[d.Verdict]
	switch d.Why {
	case maps.WhyNonIP:
		return "not IPv4 or IPv6: " + verdict
	case maps.WhyMalformed:
		return "malformed (headers truncated or invalid): " + verdict
	case maps.WhyUnmatched:
		return "no rule matches: " + verdict
	case maps.WhyBan:
		return "the source is banned (a rule's action ban, or xdplimit ban): " + verdict
	case maps.WhyNoRequest:
		return "the reflection guard: from a reflector's port (or an echo reply), and the capturing host sent no request it answers: " + verdict
	case maps.WhyAllow, maps.WhyDeny:
		if e, list := listEntry(p, pk.src); e.IsValid() {
			return fmt.Sprintf("%s entry %s: %s", list, e, verdict)
		}
		return fmt.Sprintf("%v: %s", d.Why, verdict)
	case maps.WhyRule:
		if d.Rule < 0 || d.Rule >= len(p.Rules) {
			break
		}
		r := p.Rules[d.Rule]
		head := fmt.Sprintf("rule %s (#%d, line %d)%s", r.Name, d.Rule+1, r.Line, pk.sig.text(r.Match))
		if d.Level < 0 {
			own := r.Levels[0].Key
			levels := "its limit"
			if len(r.Levels) > 1 {
				levels = fmt.Sprintf("all %d levels", len(r.Levels))
			}
			return fmt.Sprintf("%s, %s: %s: within %s", head, keyText(own, maskFor(own, pk.src), pk.portFor(own)), verdict, levels)
		}
		if d.Level >= len(r.Levels) {
			break
		}
		lv := r.Levels[d.Level]
		name := "own limit"
		if d.Level > 0 {
			name = fmt.Sprintf("aggregate[%d]", d.Level-1)
		}
		return fmt.Sprintf("%s, level %d (%s: %s), %s: %s", head, d.Level, name, lv.Limit, keyText(lv.Key, d.Source, d.Port), verdict)
	}
	return fmt.Sprintf("%v, rule %d, level %d: %s", d.Why, d.Rule, d.Level, verdict)
}

// portFor is the port a key of kind k takes from the packet.
func (p parsed) portFor(k policy.Key) uint16 {
	if k.Kind == policy.KeySrcIPSrcPort {
		return p.sport
	}
	return p.dport
}

// maskFor masks a source to a key's prefix for its family.
func maskFor(k policy.Key, src netip.Addr) netip.Addr {
	if k.Kind == policy.KeyGlobal || !src.IsValid() {
		return netip.Addr{}
	}
	bits := k.IPv6Prefix
	if src.Is4() {
		bits = k.IPv4Prefix
	}
	p, err := src.Prefix(bits)
	if err != nil {
		return src
	}
	return p.Addr()
}

// keyText writes a state key as the policy names it: the source masked to
// the key's prefix, with the port for src_ip+dst_port and src_ip+src_port.
func keyText(k policy.Key, src netip.Addr, port uint16) string {
	if k.Kind == policy.KeyGlobal || !src.IsValid() {
		return "key global"
	}
	bits := k.IPv6Prefix
	if src.Is4() {
		bits = k.IPv4Prefix
	}
	s := fmt.Sprintf("key %s %s", k.Kind, netip.PrefixFrom(src, bits))
	if k.Kind == policy.KeySrcIPDstPort || k.Kind == policy.KeySrcIPSrcPort {
		s += fmt.Sprintf(" port %d", port)
	}
	return s
}

// listEntry finds the allow or deny entry that decides src: the longest
// matching prefix across both, as the datapath looks them up.
func listEntry(p *policy.Policy, src netip.Addr) (netip.Prefix, string) {
	var best netip.Prefix
	list := ""
	src = src.Unmap()
	for _, l := range []struct {
		name string
		ps   []netip.Prefix
	}{{"allow list", p.Allow}, {"deny list", p.Deny}} {
		for _, e := range l.ps {
			if e.Contains(src) && (!best.IsValid() || e.Bits() > best.Bits()) {
				best, list = e, l.name
			}
		}
	}
	return best, list
}

// topDrops ranks (source, rule) pairs by the packets dropped or
// shadow-dropped, ties broken by address and rule so the output is stable.
func topDrops(drops map[sourceRule]*SourceDrops, k int) []SourceDrops {
	all := make([]SourceDrops, 0, len(drops))
	for _, d := range drops {
		all = append(all, *d)
	}
	slices.SortFunc(all, func(a, b SourceDrops) int {
		if c := cmp.Compare(b.refused(), a.refused()); c != 0 {
			return c
		}
		if c := a.Source.Compare(b.Source); c != 0 {
			return c
		}
		return cmp.Compare(a.Rule, b.Rule)
	})
	if len(all) > k {
		all = all[:k]
	}
	return all
}

// refused is what a source had refused: dropped, shadow-dropped or
// answered.
func (d SourceDrops) refused() uint64 {
	return d.Drop.Packets + d.Shadow.Packets + d.Cookie.Packets + d.Reject.Packets
}
