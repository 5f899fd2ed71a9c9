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
// code). Each is one more classifier dimension (docs/design.md).

var (
	lengthKind = rangeKind{one: "length", many: "lengths", max: 65535, example: "[1000-1500]", scalarOK: true}
	ttlKind    = rangeKind{one: "TTL", many: "TTLs", max: 255, example: "[250-255]", scalarOK: true}
	dscpKind   = rangeKind{one: "DSCP value", many: "DSCP values", max: 63, example: "[46]", scalarOK: true}
	tosKind    = rangeKind{one: "TOS value", many: "TOS values", max: 255, example: "[184]", scalarOK: true}
)

// ICMP matches ICMP or ICMPv6 messages by type and code; -1 is any.
type ICMP struct{ Type, Code int }

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
}

// icmp decodes {type: NAME|N, code: N}; names need a known protocol, as
// ICMP and ICMPv6 number their types differently.
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
	ic := &ICMP{Type: -1, Code: -1}
	if f, ok := m["type"]; ok {
		fpath := join(path, "type")
		if s, ok := d.scalar(f.value, fpath, "an ICMP type"); ok {
			v, err := strconv.ParseUint(s, 10, 8)
			name, named := icmpTypes[proto][s]
			switch {
			case err == nil:
				ic.Type = int(v)
			case isNumber(s):
				d.errorf(f.value, fpath, "%q is out of range; ICMP types are 0 to 255", s)
			case named && protoKnown:
				ic.Type = name
			case protoKnown:
				d.errorf(f.value, fpath, "unknown %s type %q; use 0 to 255 or one of %s", proto, s, strings.Join(slices.Sorted(maps.Keys(icmpTypes[proto])), ", "))
			default:
				d.errorf(f.value, fpath, "ICMP type %q: a type name needs protocol icmp or icmpv6", s)
			}
		}
	}
	if f, ok := m["code"]; ok {
		fpath := join(path, "code")
		if s, ok := d.scalar(f.value, fpath, "an ICMP code"); ok {
			if v, err := strconv.ParseUint(s, 10, 8); err == nil {
				ic.Code = int(v)
			} else {
				d.errorf(f.value, fpath, "%q is not an ICMP code; use 0 to 255", s)
			}
		}
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

// icmpTypeName is a type's name for protocol p, or its number.
func icmpTypeName(p Protocol, t int) string {
	for name, v := range icmpTypes[p] {
		if v == t {
			return name
		}
	}
	return strconv.Itoa(t)
}

func (ic ICMP) string(p Protocol) string {
	var parts []string
	if ic.Type >= 0 {
		parts = append(parts, "type "+icmpTypeName(p, ic.Type))
	}
	if ic.Code >= 0 {
		parts = append(parts, "code "+strconv.Itoa(ic.Code))
	}
	return "icmp {" + strings.Join(parts, ", ") + "}"
}

// Matches reports whether an ICMP message of type t and code c matches.
func (ic ICMP) Matches(t, c uint8) bool {
	return (ic.Type < 0 || ic.Type == int(t)) && (ic.Code < 0 || ic.Code == int(c))
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
// through list, the icmp part returned.
func (m Match) signatureStrings(list func(string, int, func(int) string)) []string {
	for _, f := range []struct {
		name string
		rs   []Range
	}{{"length", m.Length}, {"ttl", m.TTL}, {"dscp", m.DSCP}, {"tos", m.TOS}} {
		list(f.name, len(f.rs), func(i int) string { return f.rs[i].String() })
	}
	if m.ICMP == nil {
		return nil
	}
	return []string{m.ICMP.string(m.Protocol)}
}

// coversSignature: a matches every packet b matches on the signature
// fields (see covers).
func coversSignature(a, b Match) bool {
	if !coversRanges(a.Length, b.Length, 65535) || !coversRanges(a.TTL, b.TTL, 255) {
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
	if b.ICMP == nil {
		return false
	}
	return (a.ICMP.Type < 0 || a.ICMP.Type == b.ICMP.Type) && (a.ICMP.Code < 0 || a.ICMP.Code == b.ICMP.Code)
}
