// SPDX-License-Identifier: Apache-2.0

package compiler

import (
	"testing"

	"github.com/xdplimit/xdplimit/maps"
)

const signatureDims = maps.DimLen | maps.DimTTL | maps.DimTOS | maps.DimICMPType | maps.DimICMPCode

// A policy without signature fields looks none of them up.
func TestSignatureUnused(t *testing.T) {
	img := compileYAML(t, `
rules:
  - {name: dns, match: {protocol: udp, dst_ports: [53]}, limit: {algorithm: token_bucket, rate: 10/s, burst: 10}}
`)
	if img.Dims&signatureDims != 0 || img.Len != nil || img.TTL != nil || img.TOS != nil || img.ICMPType != nil || img.ICMPCode != nil {
		t.Fatalf("dims %#x: signature dimensions without a rule using them", img.Dims)
	}
}

// Each field's bitmaps: rules without the field match every slot; icmp
// rules match unknown type/code (fragments), never non-ICMP packets.
func TestSignatureBitmaps(t *testing.T) {
	img := compileYAML(t, `
rules:
  - {name: echo, match: {protocol: icmp, icmp: {type: echo-request}}, limit: {algorithm: token_bucket, rate: 10/s, burst: 10}}
  - {name: big, match: {length: [1000-1500], ttl: 250-255, dscp: [46]}, limit: {algorithm: token_bucket, rate: 10/s, burst: 10}}
  - {name: code, match: {protocol: icmp, icmp: {code: 1}}, limit: {algorithm: token_bucket, rate: 10/s, burst: 10}}
`)
	if img.Dims&signatureDims != signatureDims {
		t.Fatalf("dims %#x, want all signature dimensions", img.Dims)
	}
	for _, c := range []struct {
		name string
		b    maps.Bitmap
		rule int
		want bool
	}{
		{"len 999 big", img.Len[999], 1, false},
		{"len 1000 big", img.Len[1000], 1, true},
		{"len 1500 big", img.Len[1500], 1, true},
		{"len 1501 big", img.Len[1501], 1, false},
		{"len 40 echo", img.Len[40], 0, true},
		{"ttl 250 big", img.TTL[250], 1, true},
		{"ttl 249 big", img.TTL[249], 1, false},
		{"tos 184 big", img.TOS[184], 1, true},
		{"tos 187 big", img.TOS[187], 1, true},
		{"tos 188 big", img.TOS[188], 1, false},
		{"type 8 echo", img.ICMPType[8], 0, true},
		{"type 0 echo", img.ICMPType[0], 0, false},
		{"type frag echo", img.ICMPType[maps.ICMPIdxFrag], 0, true},
		{"type none echo", img.ICMPType[maps.ICMPIdxNone], 0, false},
		{"type none big", img.ICMPType[maps.ICMPIdxNone], 1, true},
		{"type 0 code", img.ICMPType[0], 2, true},
		{"code 1 code", img.ICMPCode[1], 2, true},
		{"code 0 code", img.ICMPCode[0], 2, false},
		{"code 0 echo", img.ICMPCode[0], 0, true},
	} {
		if has(c.b, c.rule) != c.want {
			t.Errorf("%s: rule %d set = %v, want %v", c.name, c.rule, !c.want, c.want)
		}
	}
}

// icmp lists and ranges set the bit of every value they hold, in the type
// and code arrays independently, and the fragment slot; nothing else.
func TestSignatureICMPLists(t *testing.T) {
	img := compileYAML(t, `
rules:
  - {name: pings, match: {protocol: icmp, icmp: {type: [echo-request, echo-reply, 13-14]}}, limit: {algorithm: token_bucket, rate: 10/s, burst: 10}}
  - {name: unreach, match: {protocol: icmp, icmp: {type: dest-unreachable, code: [0-3, 13]}}, limit: {algorithm: token_bucket, rate: 10/s, burst: 10}}
  - {name: rest, limit: {algorithm: token_bucket, rate: 10/s, burst: 10}}
`)
	want := map[int]map[uint32]bool{ // rule -> slots set in the type array
		0: {0: true, 8: true, 13: true, 14: true, maps.ICMPIdxFrag: true},
		1: {3: true, maps.ICMPIdxFrag: true},
	}
	for rule, slots := range want {
		for s := range maps.ICMPSlots {
			if got := has(img.ICMPType[s], rule); got != slots[s] {
				t.Errorf("type slot %d, rule %d: set %v, want %v", s, rule, got, slots[s])
			}
		}
	}
	codes := map[uint32]bool{0: true, 1: true, 2: true, 3: true, 13: true, maps.ICMPIdxFrag: true}
	for s := range maps.ICMPSlots {
		if got := has(img.ICMPCode[s], 1); got != codes[s] {
			t.Errorf("code slot %d, rule unreach: set %v, want %v", s, got, codes[s])
		}
		// Rules without a code constraint match every code slot.
		if !has(img.ICMPCode[s], 0) || !has(img.ICMPCode[s], 2) {
			t.Errorf("code slot %d: pings or rest lacks its bit", s)
		}
		if !has(img.ICMPType[s], 2) {
			t.Errorf("type slot %d: rest lacks its bit", s)
		}
	}
}
