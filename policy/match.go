// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"cmp"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml/ast"
)

var protocols = map[string]Protocol{
	"any": ProtoAny, "tcp": ProtoTCP, "udp": ProtoUDP, "icmp": ProtoICMP, "icmpv6": ProtoICMPv6,
}

// match decodes a rule's match. It reports whether the result can be
// trusted by the checks across rules.
func (d *decoder) match(n ast.Node, path string) (Match, bool) {
	before := len(d.errs)
	mt := Match{Protocol: ProtoAny}
	m := d.mapping(n, path, "protocol", "dst_ports", "src_ports", "src_cidrs", "dst_cidrs", "src_countries", "src_asns",
		"tcp_flags", "vlan", "length", "ttl", "dscp", "tos", "icmp", "payload")
	if m == nil {
		return mt, false
	}
	protoOK := true
	if f, ok := m["protocol"]; ok {
		fpath := join(path, "protocol")
		if s, ok := d.scalar(f.value, fpath, "a protocol"); ok {
			if p, ok := protocols[s]; ok {
				mt.Protocol = p
			} else {
				d.errorf(f.value, fpath, "unknown protocol %q; use tcp, udp, icmp, icmpv6 or any", s)
				protoOK = false
			}
		} else {
			protoOK = false
		}
	}
	for _, name := range []string{"src_ports", "dst_ports"} {
		f, ok := m[name]
		if !ok {
			continue
		}
		fpath := join(path, name)
		if protoOK && !mt.Protocol.hasPorts() {
			d.errorf(f.key, fpath, "%s needs protocol tcp or udp (protocol is %s)", name, mt.Protocol)
		}
		ports := d.ports(f.value, fpath)
		if name == "src_ports" {
			mt.SrcPorts = ports
		} else {
			mt.DstPorts = ports
		}
	}
	if f, ok := m["src_cidrs"]; ok {
		mt.SrcCIDRs = d.cidrs(f.value, join(path, "src_cidrs"))
	}
	if f, ok := m["dst_cidrs"]; ok {
		mt.DstCIDRs = d.cidrs(f.value, join(path, "dst_cidrs"))
	}
	d.geoMatch(&mt, m, path)
	if f, ok := m["tcp_flags"]; ok {
		fpath := join(path, "tcp_flags")
		if protoOK && mt.Protocol != ProtoTCP {
			d.errorf(f.key, fpath, "tcp_flags needs protocol tcp (protocol is %s)", mt.Protocol)
		}
		mt.TCPFlags = d.tcpFlags(f.value, fpath)
	}
	if f, ok := m["vlan"]; ok {
		mt.VLANs = d.vlans(f.value, join(path, "vlan"))
	}
	d.signature(&mt, m, path, protoOK)
	ok := len(d.errs) == before
	if ok {
		d.checkFamilies(mt, m, path)
	}
	return mt, ok
}

var rangeRE = regexp.MustCompile(`^([0-9]{1,5})(?:-([0-9]{1,5}))?$`)

// rangeKind names what a list of ranges holds, for its messages.
type rangeKind struct {
	one, many string // "port", "ports"
	max       int
	example   string
	scalarOK  bool // a single value or range may stand without a list
}

// a is one with its article: "a port", "an ICMP code".
func (k rangeKind) a() string {
	if strings.ContainsRune("AEIOU", rune(k.one[0])) {
		return "an " + k.one
	}
	return "a " + k.one
}

var portKind = rangeKind{one: "port", many: "ports", max: 65535, example: "[53, 1024-65535]"}

// ports decodes a list of ports and ranges.
func (d *decoder) ports(n ast.Node, path string) []PortRange { return d.ranges(n, path, portKind) }

// ranges decodes a list of values and ranges, sorted with overlapping and
// adjacent ranges merged, so that each value is in at most one range.
func (d *decoder) ranges(n ast.Node, path string, k rangeKind) []Range {
	return d.rangesOrWords(n, path, k, nil)
}

// rangesOrWords is ranges whose elements may also be words (ICMP type
// names): an element that is not a number or range goes to word, which
// returns its value or reports why it has none.
func (d *decoder) rangesOrWords(n ast.Node, path string, k rangeKind, word func(e ast.Node, path, s string) (uint16, bool)) []Range {
	dn := d.deref(n, path)
	if dn == nil {
		return nil
	}
	elems := []ast.Node{dn}
	_, isList := dn.(*ast.SequenceNode)
	if isList || !k.scalarOK {
		elems = d.sequence(dn, path, k.example)
	}
	var rs []Range
	for i, e := range elems {
		epath := path
		if isList {
			epath = index(path, i)
		}
		s, ok := d.scalar(e, epath, k.a()+" or range")
		if !ok {
			continue
		}
		m := rangeRE.FindStringSubmatch(s)
		if m == nil && word != nil {
			if v, ok := word(e, epath, s); ok {
				rs = append(rs, Range{v, v})
			}
			continue
		}
		if m == nil {
			d.errorf(e, epath, "%q is not %s or range; use N or LO-HI with %s 0 to %d", s, k.a(), k.many, k.max)
			continue
		}
		lo, _ := strconv.Atoi(m[1])
		hi := lo
		if m[2] != "" {
			hi, _ = strconv.Atoi(m[2])
		}
		switch {
		case lo > k.max || hi > k.max:
			d.errorf(e, epath, "%q is out of range; %s are 0 to %d", s, k.many, k.max)
		case lo > hi:
			d.errorf(e, epath, "%q is an empty range; write the lower %s first", s, k.one)
		default:
			rs = append(rs, Range{uint16(lo), uint16(hi)})
		}
	}
	return mergeRanges(rs)
}

func mergeRanges(rs []PortRange) []PortRange {
	slices.SortFunc(rs, func(a, b PortRange) int { return cmp.Or(cmp.Compare(a.Lo, b.Lo), cmp.Compare(a.Hi, b.Hi)) })
	var out []PortRange
	for _, r := range rs {
		if n := len(out); n > 0 && int(r.Lo) <= int(out[n-1].Hi)+1 {
			out[n-1].Hi = max(out[n-1].Hi, r.Hi)
			continue
		}
		out = append(out, r)
	}
	return out
}

// cidrs decodes a list of CIDRs: masked (with a warning when that changed
// the text), deduplicated and sorted.
func (d *decoder) cidrs(n ast.Node, path string) []netip.Prefix {
	var ps []netip.Prefix
	for i, e := range d.sequence(n, path, "[192.0.2.0/24, 2001:db8::/32]") {
		if p, ok := d.prefix(e, index(path, i)); ok {
			ps = append(ps, p)
		}
	}
	slices.SortFunc(ps, comparePrefix)
	return slices.Compact(ps)
}

// prefix decodes one CIDR of a list, warning when it had host bits set.
func (d *decoder) prefix(e ast.Node, path string) (netip.Prefix, bool) {
	if m, ok := e.(*ast.MappingNode); ok && len(m.Values) == 1 {
		// Inside {...}, the YAML parser reads 2001:db8::1 as a key and a value.
		d.errorf(e, path, "expected a CIDR, got a mapping; write IPv6 addresses inside {...} in quotes, like \"2001:db8::/32\"")
		return netip.Prefix{}, false
	}
	s, ok := d.scalar(e, path, "a CIDR")
	if !ok {
		return netip.Prefix{}, false
	}
	p, warn, err := parsePrefix(s)
	if err != nil {
		d.errorf(e, path, "%v", err)
		return p, false
	}
	if warn != "" {
		d.warnf(e, path, "%s", warn)
	}
	return p, true
}

var tcpFlagBits = map[string]uint8{
	"fin": TCPFlagFIN, "syn": TCPFlagSYN, "rst": TCPFlagRST, "psh": TCPFlagPSH,
	"ack": TCPFlagACK, "urg": TCPFlagURG, "ece": TCPFlagECE, "cwr": TCPFlagCWR,
}

// tcpFlags decodes a list of flag names, each plain (must be set) or with a
// leading ! (must be clear); flags not listed do not matter, except that ACK
// must be clear when SYN must be set and ack is not listed either way: a
// plain [syn] means connection openings, not the SYN-ACKs that answer them.
func (d *decoder) tcpFlags(n ast.Node, path string) *TCPFlags {
	n = d.deref(n, path)
	if n == nil {
		return nil
	}
	seq, ok := n.(*ast.SequenceNode)
	if !ok || len(seq.Values) == 0 {
		d.sequence(n, path, `[syn] or [syn, "!ack"]`) // reports why
		return nil
	}
	var f TCPFlags
	var mentioned uint8
	for i, e := range seq.Values {
		epath := index(path, i)
		s, ok := d.scalar(e, epath, "a TCP flag name")
		if !ok {
			continue
		}
		name, clear := strings.CutPrefix(s, "!")
		bit, ok := tcpFlagBits[name]
		if !ok {
			d.errorf(e, epath, "unknown TCP flag %q; use fin, syn, rst, psh, ack, urg, ece or cwr, or !name for a flag that must be clear", s)
			continue
		}
		if mentioned&bit != 0 {
			if (f.Clear&bit != 0) == clear {
				d.errorf(e, epath, "TCP flag %s is listed twice", name)
			} else {
				d.errorf(e, epath, "TCP flag %s cannot be both set and clear", name)
			}
			continue
		}
		mentioned |= bit
		if clear {
			f.Clear |= bit
		} else {
			f.Set |= bit
		}
	}
	if f.Set&TCPFlagSYN != 0 && mentioned&TCPFlagACK == 0 {
		f.Clear |= TCPFlagACK
	}
	return &f
}

// vlans decodes a list of 802.1Q VLAN ids, sorted and deduplicated.
func (d *decoder) vlans(n ast.Node, path string) []uint16 {
	var vs []uint16
	for i, e := range d.sequence(n, path, "[100, 200]") {
		epath := index(path, i)
		s, ok := d.scalar(e, epath, "a VLAN id")
		if !ok {
			continue
		}
		v, err := strconv.ParseUint(s, 10, 16)
		if err != nil || v > 4095 {
			d.errorf(e, epath, "%q is not a VLAN id; use 0 to 4095", s)
			continue
		}
		vs = append(vs, uint16(v))
	}
	slices.Sort(vs)
	return slices.Compact(vs)
}

// protoFamilies is the IP versions a protocol exists in: ICMP is IPv4's,
// ICMPv6 is IPv6's.
func protoFamilies(p Protocol) family {
	switch p {
	case ProtoICMP:
		return fam4
	case ProtoICMPv6:
		return fam6
	}
	return famAll
}

// families is the IP versions of the packets a match can match; 0 means it
// matches nothing.
func (m Match) families() family {
	return protoFamilies(m.Protocol) & familiesOf(m.SrcCIDRs) & familiesOf(m.DstCIDRs)
}

var familyNames = map[family]string{fam4: "IPv4", fam6: "IPv6"}

// checkFamilies warns about CIDRs that can never match because their IP
// version contradicts the protocol or the other address list.
func (d *decoder) checkFamilies(mt Match, m map[string]field, path string) {
	pf := protoFamilies(mt.Protocol)
	for _, name := range []string{"src_cidrs", "dst_cidrs"} {
		ps := mt.SrcCIDRs
		if name == "dst_cidrs" {
			ps = mt.DstCIDRs
		}
		if len(ps) == 0 || pf == famAll {
			continue
		}
		f := m[name]
		if familiesOf(ps)&pf == 0 {
			d.warnf(f.key, join(path, name), "rule never matches: every %s entry is %s, but protocol %s is %s only",
				name, familyNames[familiesOf(ps)], mt.Protocol, familyNames[pf])
			continue
		}
		for _, p := range ps {
			if familyOf(p)&pf == 0 {
				d.warnf(f.key, join(path, name), "%s never matches: protocol %s is %s only", p, mt.Protocol, familyNames[pf])
			}
		}
	}
	if len(mt.SrcCIDRs) > 0 && len(mt.DstCIDRs) > 0 {
		sf, df := familiesOf(mt.SrcCIDRs), familiesOf(mt.DstCIDRs)
		if sf&df == 0 {
			d.warnf(m["dst_cidrs"].key, join(path, "dst_cidrs"), "rule never matches: src_cidrs are all %s and dst_cidrs all %s",
				familyNames[sf], familyNames[df])
		}
	}
}

// String renders the match in the policy language's terms, for Describe.
func (m Match) String() string {
	var parts []string
	if m.Protocol != ProtoAny {
		parts = append(parts, "protocol "+m.Protocol.String())
	}
	list := func(name string, n int, item func(int) string) {
		if n == 0 {
			return
		}
		s := make([]string, n)
		for i := range s {
			s[i] = item(i)
		}
		parts = append(parts, fmt.Sprintf("%s [%s]", name, strings.Join(s, ", ")))
	}
	list("src_ports", len(m.SrcPorts), func(i int) string { return m.SrcPorts[i].String() })
	list("dst_ports", len(m.DstPorts), func(i int) string { return m.DstPorts[i].String() })
	list("src_cidrs", len(m.SrcCIDRs), func(i int) string { return m.SrcCIDRs[i].String() })
	list("dst_cidrs", len(m.DstCIDRs), func(i int) string { return m.DstCIDRs[i].String() })
	list("src_countries", len(m.SrcCountries), func(i int) string { return m.SrcCountries[i] })
	list("src_asns", len(m.SrcASNs), func(i int) string { return strconv.FormatUint(uint64(m.SrcASNs[i]), 10) })
	if m.TCPFlags != nil {
		parts = append(parts, "tcp_flags ["+strings.ReplaceAll(m.TCPFlags.String(), ",", ", ")+"]")
	}
	list("vlan", len(m.VLANs), func(i int) string { return strconv.Itoa(int(m.VLANs[i])) })
	extra := m.signatureStrings(list)
	parts = append(parts, extra...)
	if len(parts) == 0 {
		return "every IP packet"
	}
	return strings.Join(parts, ", ")
}
