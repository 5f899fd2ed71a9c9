// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"bytes"
	"testing"
)

func ff(n int) []byte { return bytes.Repeat([]byte{0xff}, n) }

func TestPayloadField(t *testing.T) {
	deadbeef := PayloadMatch{Offset: 0, Bytes: []byte{0xde, 0xad, 0xbe, 0xef}, Mask: ff(4)}
	runParseCases(t, []parseCase{
		{name: "one item", src: withMatch(`protocol: udp, dst_ports: [9000], payload: [{offset: 0, bytes: "deadbeef"}]`),
			check: wantMatch(Match{Protocol: ProtoUDP, DstPorts: []Range{{9000, 9000}}, Payload: []PayloadMatch{deadbeef}})},
		{name: "two items sorted by offset", src: withMatch(`protocol: udp, payload: [{offset: 6, bytes: "0100", mask: "ff0f"}, {offset: 0, bytes: "deadbeef"}]`),
			check: wantMatch(Match{Protocol: ProtoUDP, Payload: []PayloadMatch{deadbeef,
				{Offset: 6, Bytes: []byte{0x01, 0x00}, Mask: []byte{0xff, 0x0f}}}})},
		{name: "bytes stored masked", src: withMatch(`payload: [{offset: 3, bytes: "ffff", mask: "0ff0"}]`),
			check: wantMatch(Match{Protocol: ProtoAny, Payload: []PayloadMatch{{Offset: 3, Bytes: []byte{0x0f, 0xf0}, Mask: []byte{0x0f, 0xf0}}}})},
		{name: "0x prefix and upper case", src: withMatch(`protocol: tcp, payload: [{offset: 2, bytes: "0xDEADBEEF", mask: 0XFFFF00FF}]`),
			check: wantMatch(Match{Protocol: ProtoTCP, Payload: []PayloadMatch{{Offset: 2, Bytes: []byte{0xde, 0xad, 0x00, 0xef}, Mask: []byte{0xff, 0xff, 0x00, 0xff}}}})},
		// YAML reads 0100 and 0x0a0b as numbers; their text is the bytes.
		{name: "unquoted hex that YAML reads as numbers", src: withMatch(`payload: [{offset: "1", bytes: 0100}, {offset: 3, bytes: 0x0a0b}]`),
			check: wantMatch(Match{Protocol: ProtoAny, Payload: []PayloadMatch{
				{Offset: 1, Bytes: []byte{0x01, 0x00}, Mask: ff(2)}, {Offset: 3, Bytes: []byte{0x0a, 0x0b}, Mask: ff(2)}}})},
		{name: "overlapping items that agree", src: withMatch(`payload: [{offset: 0, bytes: "abcd"}, {offset: 1, bytes: "cd"}, {offset: 0, bytes: "0b", mask: "0f"}]`),
			check: wantMatch(Match{Protocol: ProtoAny, Payload: []PayloadMatch{
				{Offset: 0, Bytes: []byte{0x0b}, Mask: []byte{0x0f}}, {Offset: 0, Bytes: []byte{0xab, 0xcd}, Mask: ff(2)}, {Offset: 1, Bytes: []byte{0xcd}, Mask: ff(1)}}})},
		{name: "overlapping items on different bits", src: withMatch(`payload: [{offset: 0, bytes: "a0", mask: "f0"}, {offset: 0, bytes: "05", mask: "0f"}]`),
			check: wantMatch(Match{Protocol: ProtoAny, Payload: []PayloadMatch{
				{Offset: 0, Bytes: []byte{0xa0}, Mask: []byte{0xf0}}, {Offset: 0, Bytes: []byte{0x05}, Mask: []byte{0x0f}}}})},
		{name: "16 bytes at the last offset", src: withMatch(`protocol: icmp, payload: [{offset: 1500, bytes: "000102030405060708090a0b0c0d0e0f"}]`),
			check: wantMatch(Match{Protocol: ProtoICMP, Payload: []PayloadMatch{
				{Offset: 1500, Bytes: []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, Mask: ff(16)}}})},
		{name: "items 16 bytes apart end to end", src: withMatch(`payload: [{offset: 20, bytes: "01"}, {offset: 35, bytes: "02"}]`),
			check: wantMatch(Match{Protocol: ProtoAny, Payload: []PayloadMatch{
				{Offset: 20, Bytes: []byte{1}, Mask: ff(1)}, {Offset: 35, Bytes: []byte{2}, Mask: ff(1)}}})},
		{name: "block style", src: "rules:\n  - name: r\n    match:\n      protocol: udp\n      payload:\n        - offset: 0\n          bytes: deadbeef\n" +
			"    limit: {algorithm: token_bucket, rate: 1000/s, burst: 2000}\n",
			check: wantMatch(Match{Protocol: ProtoUDP, Payload: []PayloadMatch{deadbeef}})},

		{name: "not a list", src: withMatch(`payload: {offset: 0, bytes: "00"}`), errs: []string{
			`p.yaml:3:22: rules[0].match.payload: expected a list like [{offset: 0, bytes: "deadbeef"}], got a mapping`}},
		{name: "empty list", src: withMatch(`payload: []`), errs: []string{
			`p.yaml:3:22: rules[0].match.payload: empty list; leave the field out instead`}},
		{name: "item not a mapping", src: withMatch(`payload: ["deadbeef", 0]`), errs: []string{
			`p.yaml:3:23: rules[0].match.payload[0]: expected a mapping like {offset: 0, bytes: "deadbeef"}, got "deadbeef"`,
			`p.yaml:3:35: rules[0].match.payload[1]: expected a mapping like {offset: 0, bytes: "deadbeef"}, got 0`}},
		{name: "offset and bytes required", src: withMatch(`payload: [{bytes: "00"}, {offset: 1}, {offset: 2, value: "00"}]`), errs: []string{
			`p.yaml:3:23: rules[0].match.payload[0]: offset is required: where the bytes start, counted from the start of the payload, e.g. {offset: 0, bytes: "deadbeef"}`,
			`p.yaml:3:38: rules[0].match.payload[1]: bytes is required: the bytes the payload holds at offset, in hex, e.g. {offset: 0, bytes: "deadbeef"}`,
			`p.yaml:3:51: rules[0].match.payload[2]: bytes is required: the bytes the payload holds at offset, in hex, e.g. {offset: 0, bytes: "deadbeef"}`,
			`p.yaml:3:63: rules[0].match.payload[2]: unknown field "value"; allowed: offset, bytes, mask`}},
		{name: "bad offsets", src: withMatch(`payload: [{offset: x, bytes: "00"}, {offset: -1, bytes: "00"}, {offset: 1501, bytes: "00"}, {offset: 99999999999999999999, bytes: "00"}, {offset: [0], bytes: "00"}]`), errs: []string{
			`p.yaml:3:32: rules[0].match.payload[0].offset: "x" is not an offset; use a number of bytes from the start of the payload, 0 to 1500`,
			`p.yaml:3:58: rules[0].match.payload[1].offset: "-1" is out of range; payload offsets are 0 to 1500`,
			`p.yaml:3:85: rules[0].match.payload[2].offset: "1501" is out of range; payload offsets are 0 to 1500`,
			`p.yaml:3:114: rules[0].match.payload[3].offset: "99999999999999999999" is out of range; payload offsets are 0 to 1500`,
			`p.yaml:3:159: rules[0].match.payload[4].offset: expected a payload offset, got a list`}},
		{name: "bad bytes", src: withMatch(`payload: [{offset: 0, bytes: "abc"}, {offset: 0, bytes: "zz"}, {offset: 0, bytes: ""}, {offset: 0, bytes: "0x"}, {offset: 0, bytes: "000102030405060708090a0b0c0d0e0f10"}, {offset: 0, bytes: [00]}]`), errs: []string{
			`p.yaml:3:42: rules[0].match.payload[0].bytes: "abc" has an odd number of hex digits; write two digits a byte, e.g. "0abc"`,
			`p.yaml:3:69: rules[0].match.payload[1].bytes: "zz" is not hex; write bytes as hex digits, two digits a byte, like "deadbeef"`,
			`p.yaml:3:95: rules[0].match.payload[2].bytes: empty bytes; write 1 to 16 bytes in hex, like "deadbeef"`,
			`p.yaml:3:119: rules[0].match.payload[3].bytes: empty bytes; write 1 to 16 bytes in hex, like "deadbeef"`,
			`p.yaml:3:145: rules[0].match.payload[4].bytes: "000102030405060708090a0b0c0d0e0f10" is 17 bytes; a payload item holds at most 16 (one rule's items lie within 16 consecutive bytes)`,
			`p.yaml:3:203: rules[0].match.payload[5].bytes: expected bytes in hex like "deadbeef", got a list`}},
		{name: "bad masks", src: withMatch(`payload: [{offset: 0, bytes: "0102", mask: "ff"}, {offset: 0, bytes: "0102", mask: "0000"}, {offset: 0, bytes: "01", mask: "fg"}, {offset: 0, bytes: "zz", mask: "00"}]`), errs: []string{
			`p.yaml:3:56: rules[0].match.payload[0].mask: mask is 1 byte but bytes is 2 bytes; give one mask byte per byte`,
			`p.yaml:3:96: rules[0].match.payload[1].mask: mask is all zero, which matches every payload; set the bits that must match, or leave the item out`,
			`p.yaml:3:136: rules[0].match.payload[2].mask: "fg" is not hex; write mask as hex digits, two digits a byte, like "0f"`,
			`p.yaml:3:162: rules[0].match.payload[3].bytes: "zz" is not hex; write bytes as hex digits, two digits a byte, like "deadbeef"`,
			`p.yaml:3:174: rules[0].match.payload[3].mask: mask is all zero, which matches every payload; set the bits that must match, or leave the item out`}},
		{name: "block item without offset", src: "rules:\n  - name: r\n    match:\n      payload:\n        - bytes: deadbeef\n" +
			"    limit: {algorithm: token_bucket, rate: 1000/s, burst: 2000}\n", errs: []string{
			`p.yaml:5:11: rules[0].match.payload[0]: offset is required: where the bytes start, counted from the start of the payload, e.g. {offset: 0, bytes: "deadbeef"}`}},
		{name: "items wider than the window", src: withMatch(`payload: [{offset: 16, bytes: "02"}, {offset: 0, bytes: "01"}]`), errs: []string{
			`p.yaml:3:22: rules[0].match.payload: payload items of one rule must lie within 16 consecutive bytes (offsets 0 to 16 span 17)`}},
		{name: "one long item and another wider than the window", src: withMatch(`payload: [{offset: 4, bytes: "000102030405060708090a0b0c0d0e0f"}, {offset: 3, bytes: "01"}]`), errs: []string{
			`p.yaml:3:22: rules[0].match.payload: payload items of one rule must lie within 16 consecutive bytes (offsets 3 to 19 span 17)`}},
		{name: "overlapping items that differ", src: withMatch(`payload: [{offset: 0, bytes: "abcd"}, {offset: 1, bytes: "ce"}, {offset: 0, bytes: "0b", mask: "0f"}, {offset: 1, bytes: "0e", mask: "0f"}]`), errs: []string{
			`p.yaml:3:51: rules[0].match.payload[1]: payload items overlap at offset 1 with different bytes; give each byte one value (use mask for the bits that matter)`,
			`p.yaml:3:115: rules[0].match.payload[3]: payload items overlap at offset 1 with different bytes; give each byte one value (use mask for the bits that matter)`}},
		{name: "identical payload rules", src: twoRules(`protocol: udp, payload: [{offset: 0, bytes: "01"}]`, `protocol: udp, payload: [{offset: 0, bytes: "01"}]`), errs: []string{
			`p.yaml:5:5: rules[1]: rule "b" can never apply: rule "a" (line 2) comes first and matches every packet it matches`}},
		{name: "narrower payload rule first", src: twoRules(`protocol: udp, payload: [{offset: 0, bytes: "0102"}]`, `protocol: udp, payload: [{offset: 0, bytes: "01"}]`)},
	})
}

func TestPayloadWindow(t *testing.T) {
	m := matchOf(t, `payload: [{offset: 8, bytes: "0100", mask: "ff0f"}, {offset: 4, bytes: "deadbeef"}, {offset: 9, bytes: "30", mask: "f0"}]`)
	start, value, mask, ok := m.PayloadWindow()
	wantValue := [PayloadWindow]byte{0xde, 0xad, 0xbe, 0xef, 0x01, 0x30}
	wantMask := [PayloadWindow]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	if !ok || start != 4 || value != wantValue || mask != wantMask {
		t.Fatalf("PayloadWindow() = %d, %x, %x, %v; want 4, %x, %x, true", start, value, mask, ok, wantValue, wantMask)
	}
	if _, _, _, ok := matchOf(t, "protocol: udp").PayloadWindow(); ok {
		t.Fatal("PayloadWindow() of a match without payload is ok")
	}
}

func TestMatchesPayload(t *testing.T) {
	m := matchOf(t, `protocol: udp, payload: [{offset: 0, bytes: "deadbeef"}, {offset: 6, bytes: "0100", mask: "ff0f"}]`)
	for _, c := range []struct {
		name string
		p    []byte
		want bool
	}{
		{"exact", []byte{0xde, 0xad, 0xbe, 0xef, 0, 0, 0x01, 0x00}, true},
		{"masked bits differ", []byte{0xde, 0xad, 0xbe, 0xef, 9, 9, 0x01, 0xf0, 7}, true},
		{"masked-in bit differs", []byte{0xde, 0xad, 0xbe, 0xef, 0, 0, 0x01, 0x01}, false},
		{"first item differs", []byte{0xde, 0xad, 0xbe, 0xee, 0, 0, 0x01, 0x00}, false},
		{"too short", []byte{0xde, 0xad, 0xbe, 0xef, 0, 0, 0x01}, false},
		{"empty", nil, false},
	} {
		if got := m.MatchesPayload(c.p); got != c.want {
			t.Errorf("%s: MatchesPayload(%x) = %v, want %v", c.name, c.p, got, c.want)
		}
	}
	// Bytes past the payload's end whose mask is 0 need not be there.
	m = matchOf(t, `payload: [{offset: 0, bytes: "0100", mask: "ff00"}]`)
	if !m.MatchesPayload([]byte{1}) || m.MatchesPayload([]byte{2}) {
		t.Error("a byte with mask 0 past the end decides")
	}
	if !matchOf(t, "protocol: udp").MatchesPayload(nil) {
		t.Error("a match without payload does not match an empty payload")
	}
}

func TestPayloadString(t *testing.T) {
	for _, c := range []struct{ match, want string }{
		{`protocol: udp, dst_ports: [9000], payload: [{offset: 0, bytes: "deadbeef"}, {offset: 6, bytes: "0100", mask: "ff0f"}]`,
			"protocol udp, dst_ports [9000], payload [0: deadbeef, 6: 0100/ff0f]"},
		{`payload: [{offset: 2, bytes: "0xABCD", mask: "ffff"}]`, "payload [2: abcd]"},
		{`payload: [{offset: 2, bytes: "ffff", mask: "0ff0"}]`, "payload [2: 0ff0/0ff0]"},
		{`protocol: icmp, icmp: {type: echo-request}, ttl: 64, payload: [{offset: 0, bytes: "00"}]`,
			"protocol icmp, ttl [64], icmp {type echo-request}, payload [0: 00]"},
	} {
		if got := matchOf(t, c.match).String(); got != c.want {
			t.Errorf("%s: String() = %q, want %q", c.match, got, c.want)
		}
	}
}

func TestCoversPayload(t *testing.T) {
	for _, tc := range []struct {
		earlier, later string
		covers         bool
	}{
		{`payload: [{offset: 0, bytes: "0102"}]`, `payload: [{offset: 0, bytes: "0102"}]`, true},
		// The same bytes written differently.
		{`payload: [{offset: 0, bytes: "0102"}]`, `payload: [{offset: 1, bytes: "02"}, {offset: 0, bytes: "01"}]`, true},
		// A subset of b's bytes, or of its bits.
		{`payload: [{offset: 1, bytes: "02"}]`, `payload: [{offset: 0, bytes: "010203"}]`, true},
		{`payload: [{offset: 0, bytes: "010203"}]`, `payload: [{offset: 1, bytes: "02"}]`, false},
		{`payload: [{offset: 0, bytes: "10", mask: "f0"}]`, `payload: [{offset: 0, bytes: "12"}]`, true},
		{`payload: [{offset: 0, bytes: "12"}]`, `payload: [{offset: 0, bytes: "10", mask: "f0"}]`, false},
		{`payload: [{offset: 0, bytes: "12", mask: "0f"}]`, `payload: [{offset: 0, bytes: "10", mask: "f0"}]`, false},
		// The same bytes at different offsets, different bytes.
		{`payload: [{offset: 0, bytes: "0102"}]`, `payload: [{offset: 1, bytes: "0102"}]`, false},
		{`payload: [{offset: 0, bytes: "0102"}]`, `payload: [{offset: 0, bytes: "0103"}]`, false},
		// Windows at different starts that overlap.
		{`payload: [{offset: 10, bytes: "0102"}]`, `payload: [{offset: 0, bytes: "01"}, {offset: 10, bytes: "0102"}]`, true},
		{`payload: [{offset: 20, bytes: "01"}]`, `payload: [{offset: 10, bytes: "01"}]`, false},
		// No payload covers any; payload never covers none.
		{"", `payload: [{offset: 0, bytes: "01"}]`, true},
		{`payload: [{offset: 0, bytes: "01"}]`, "", false},
		// With the other dimensions.
		{`protocol: udp, payload: [{offset: 0, bytes: "01"}]`, `protocol: udp, dst_ports: [53], payload: [{offset: 0, bytes: "0102"}]`, true},
		{`protocol: udp, payload: [{offset: 0, bytes: "01"}]`, `protocol: tcp, payload: [{offset: 0, bytes: "01"}]`, false},
		{`payload: [{offset: 0, bytes: "01"}]`, `protocol: tcp, payload: [{offset: 0, bytes: "01"}]`, true},
	} {
		a, b := matchOf(t, tc.earlier), matchOf(t, tc.later)
		if got := covers(a, b); got != tc.covers {
			t.Errorf("covers({%s}, {%s}) = %v, want %v", tc.earlier, tc.later, got, tc.covers)
		}
	}
}
