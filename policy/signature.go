// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml/ast"
)

// The signature fields of a match: what operators describe floods by
// besides addresses and ports (IP length, TTL, DSCP or TOS, ICMP type and
// code, and the payload's bytes in payload.go). Each is one more
// classifier dimension (docs/design.md).

var (
	lengthKind = rangeKind{one: "length", many: "lengths", max: 65535, example: "[1000-1500]", scalarOK: true}
	ttlKind    = rangeKind{one: "TTL", many: "TTLs", max: 255, example: "[250-255]", scalarOK: true}
	dscpKind   = rangeKind{one: "DSCP value", many: "DSCP values", max: 63, example: "[46]", scalarOK: true}
	tosKind    = rangeKind{one: "TOS value", many: "TOS values", max: 255, example: "[184]", scalarOK: true}
)

var (
	icmpTypeKind = rangeKind{one: "ICMP type", many: "ICMP types", max: 255, example: "[echo-request, 13-14]", scalarOK: true}
	icmpCodeKind = rangeKind{one: "ICMP code", many: "ICMP codes", max: 255, example: "[0-3, 13]", scalarOK: true}
)

// ICMP matches ICMP or ICMPv6 messages by type and code: a message matches
// when its type is in Types and its code in Codes, each sorted and merged
// like ports; nil is any.
type ICMP struct{ Types, Codes []Range }

// icmpTypes name the ICMP (RFC 792 and successors) and ICMPv6 (RFC 4443,
// 4861, 3810) message types operators meet in floods and filters.
var icmpTypes = map[Protocol]map[string]int{
	ProtoICMP: {
		"echo-reply": 0, "dest-unreachable": 3, "source-quench": 4, "redirect": 5,
		"echo-request": 8, "router-advertisement": 9, "router-solicitation": 10,
		"time-exceeded": 11, "parameter-problem": 12, "timestamp-request": 13,
		"timestamp-reply": 14, "info-request": 15, "info-reply": 16,
		"address-mask-request": 17, "address-mask-reply": 18,
	},
	ProtoICMPv6: {
		"dest-unreachable": 1, "packet-too-big": 2, "time-exceeded": 3, "parameter-problem": 4,
		"echo-request": 128, "echo-reply": 129, "mld-listener-query": 130,
		"mld-listener-report": 131, "mld-listener-done": 132, "router-solicitation": 133,
		"router-advertisement": 134, "neighbor-solicitation": 135,
		"neighbor-advertisement": 136, "redirect": 137, "mld2-listener-report": 143,
	},
}

// signature decodes the signature fields of a match into mt.
func (d *decoder) signature(mt *Match, m map[string]field, path string, protoOK bool) {
	if f, ok := m["length"]; ok {
		mt.Length = d.ranges(f.value, join(path, "length"), lengthKind)
	}
	if f, ok := m["ttl"]; ok {
		mt.TTL = d.ranges(f.value, join(path, "ttl"), ttlKind)
	}
	if f, ok := m["dscp"]; ok {
		mt.DSCP = d.ranges(f.value, join(path, "dscp"), dscpKind)
	}
	if f, ok := m["tos"]; ok {
		fpath := join(path, "tos")
		if _, both := m["dscp"]; both {
			d.errorf(f.key, fpath, "dscp and tos cannot both be set; dscp is the upper six bits of tos")
		}
		mt.TOS = d.ranges(f.value, fpath, tosKind)
	}
	if f, ok := m["icmp"]; ok {
		fpath := join(path, "icmp")
		isICMP := mt.Protocol == ProtoICMP || mt.Protocol == ProtoICMPv6
		if protoOK && !isICMP {
			d.errorf(f.key, fpath, "icmp needs protocol icmp or icmpv6 (protocol is %s)", mt.Protocol)
		}
		mt.ICMP = d.icmp(f.value, fpath, mt.Protocol, protoOK && isICMP)
	}
	if f, ok := m["payload"]; ok {
		mt.Payload = d.payload(f.value, join(path, "payload"))
	}
}

// icmp decodes {type: TYPES, code: CODES}, each one value or range or a
// list of them, types also by name; names need a known protocol, as ICMP
// and ICMPv6 number their types differently.
func (d *decoder) icmp(n ast.Node, path string, proto Protocol, protoKnown bool) *ICMP {
	n = d.deref(n, path)
	if n == nil {
		return nil
	}
	if _, ok := n.(*ast.MappingNode); !ok {
		d.errorf(n, path, "expected a mapping like {type: echo-request, code: 0}, got %s", describeNode(n))
		return nil
	}
	m := d.mapping(n, path, "type", "code")
	ic := &ICMP{}
	if f, ok := m["type"]; ok {
		ic.Types = d.rangesOrWords(f.value, join(path, "type"), icmpTypeKind, func(e ast.Node, epath, s string) (uint16, bool) {
			v, named := icmpTypes[proto][s]
			switch {
			case isNumber(s):
				d.errorf(e, epath, "%q is out of range; ICMP types are 0 to 255", s)
			case named && protoKnown:
				return uint16(v), true
			case protoKnown:
				d.errorf(e, epath, "unknown %s type %q; use 0 to 255, LO-HI or one of %s", proto, s, strings.Join(slices.Sorted(maps.Keys(icmpTypes[proto])), ", "))
			default:
				d.errorf(e, epath, "ICMP type %q: a type name needs protocol icmp or icmpv6", s)
			}
			return 0, false
		})
	}
	if f, ok := m["code"]; ok {
		ic.Codes = d.ranges(f.value, join(path, "code"), icmpCodeKind)
	}
	if len(m) == 0 {
		d.errorf(n, path, "empty icmp; give a type, a code or both, or leave the field out")
	}
	return ic
}

func isNumber(s string) bool {
	_, err := strconv.ParseUint(s, 10, 64)
	return err == nil
}

// icmpTypeName is a type's name for protocol p, or "" when it has none.
func icmpTypeName(p Protocol, t int) string {
	for name, v := range icmpTypes[p] {
		if v == t {
			return name
		}
	}
	return ""
}

func (ic ICMP) string(p Protocol) string {
	var parts []string
	if ic.Types != nil {
		parts = append(parts, "type "+icmpValues(ic.Types, func(v int) string { return icmpTypeName(p, v) }))
	}
	if ic.Codes != nil {
		parts = append(parts, "code "+icmpValues(ic.Codes, func(int) string { return "" }))
	}
	return "icmp {" + strings.Join(parts, ", ") + "}"
}

// icmpValues writes ranges as the policy would: one value bare, several as
// a list; a range whose every value has a name is written as those names,
// as [echo-request, echo-reply] merges into 128-129 in ICMPv6.
func icmpValues(rs []Range, name func(int) string) string {
	var items []string
	for _, r := range rs {
		var names []string
		for v := int(r.Lo); v <= int(r.Hi); v++ {
			n := name(v)
			if n == "" {
				names = nil
				break
			}
			names = append(names, n)
		}
		if names == nil {
			names = []string{r.String()}
		}
		items = append(items, names...)
	}
	if len(items) == 1 {
		return items[0]
	}
	return "[" + strings.Join(items, ", ") + "]"
}

// Matches reports whether an ICMP message of type t and code c matches.
func (ic ICMP) Matches(t, c uint8) bool {
	return InRanges(ic.Types, uint16(t)) && InRanges(ic.Codes, uint16(c))
}

// InRanges reports whether v is in one of rs; no ranges is every value.
func InRanges(rs []Range, v uint16) bool {
	if len(rs) == 0 {
		return true
	}
	return slices.ContainsFunc(rs, func(r Range) bool { return r.Lo <= v && v <= r.Hi })
}

// MatchesTOS reports whether a TOS byte (or IPv6 traffic class) satisfies
// the match's dscp or tos.
func (m Match) MatchesTOS(tos uint8) bool {
	return InRanges(m.DSCP, uint16(tos>>2)) && InRanges(m.TOS, uint16(tos))
}

// signatureStrings renders the signature fields for String: the ranges
// through list, the icmp and payload parts returned.
func (m Match) signatureStrings(list func(string, int, func(int) string)) []string {
	for _, f := range []struct {
		name string
		rs   []Range
	}{{"length", m.Length}, {"ttl", m.TTL}, {"dscp", m.DSCP}, {"tos", m.TOS}} {
		list(f.name, len(f.rs), func(i int) string { return f.rs[i].String() })
	}
	var out []string
	if m.ICMP != nil {
		out = append(out, m.ICMP.string(m.Protocol))
	}
	if len(m.Payload) > 0 {
		out = append(out, payloadString(m.Payload))
	}
	return out
}

// coversSignature: a matches every packet b matches on the signature
// fields (see covers).
func coversSignature(a, b Match) bool {
	if !coversRanges(a.Length, b.Length, 65535) || !coversRanges(a.TTL, b.TTL, 255) || !coversPayload(a, b) {
		return false
	}
	for v := 0; v < 256; v++ {
		if b.MatchesTOS(uint8(v)) && !a.MatchesTOS(uint8(v)) {
			return false
		}
	}
	if a.ICMP == nil {
		return true
	}
	var types, codes []Range // b's; none is every value
	if b.ICMP != nil {
		types, codes = b.ICMP.Types, b.ICMP.Codes
	}
	return coversRanges(a.ICMP.Types, types, 255) && coversRanges(a.ICMP.Codes, codes, 255)
}
