// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"cmp"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml/ast"
)

// The payload field of a match: bytes the transport payload must hold, at
// offsets from its start, under a mask. The payload starts after the TCP
// header with its options, after the 8-byte UDP header, after the 8-byte
// ICMP or ICMPv6 header, after SCTP's 12-byte common header, and for any
// other protocol at the start of the L4 header. The datapath reads one
// window of PayloadWindow bytes per rule, so a rule's items must lie
// within one.

// PayloadWindow is how many consecutive payload bytes one rule's payload items may span.
const PayloadWindow = 16

// MaxPayloadOffset bounds an item's offset (its last byte at most MaxPayloadOffset+15).
const MaxPayloadOffset = 1500

// PayloadMatch: the transport payload holds Bytes at Offset under Mask.
type PayloadMatch struct {
	Offset int
	Bytes  []byte // 1 to PayloadWindow bytes, stored already masked (Bytes[i] &= Mask[i])
	Mask   []byte // same length as Bytes; all 0xff where the policy gave no mask
}

// String writes the item as Match.String does: "6: 0100/ff0f", the mask
// only when it is not all 0xff.
func (p PayloadMatch) String() string {
	s := fmt.Sprintf("%d: %x", p.Offset, p.Bytes)
	if slices.ContainsFunc(p.Mask, func(b byte) bool { return b != 0xff }) {
		s += fmt.Sprintf("/%x", p.Mask)
	}
	return s
}

// PayloadWindow merges a match's payload items into one window: its start
// (the lowest offset), and the value and mask of its PayloadWindow bytes
// (bytes past the items' end have mask 0). ok is false when m has no
// payload items. Items are within one window once the policy is decoded;
// bytes of a hand-made Match beyond it are left out.
func (m Match) PayloadWindow() (start int, value, mask [PayloadWindow]byte, ok bool) {
	if len(m.Payload) == 0 {
		return 0, value, mask, false
	}
	start = m.Payload[0].Offset
	for _, it := range m.Payload[1:] {
		start = min(start, it.Offset)
	}
	for _, it := range m.Payload {
		for i, b := range it.Bytes {
			pos := it.Offset - start + i
			if pos >= PayloadWindow || i >= len(it.Mask) {
				break
			}
			value[pos] |= b & it.Mask[i]
			mask[pos] |= it.Mask[i]
		}
	}
	return start, value, mask, true
}

// PayloadNeed is how many bytes of a window its mask reads: up to its last
// masked byte (0 for an all-zero mask).
func PayloadNeed(mask [PayloadWindow]byte) int {
	n := 0
	for i, b := range mask {
		if b != 0 {
			n = i + 1
		}
	}
	return n
}

// MatchesPayload reports whether a transport payload p satisfies m's
// payload items (true when m has none). A payload too short to hold a
// byte the items constrain does not match. For Go-side explanation and
// tests; the datapath judges fragments as matching, which this does not
// model.
func (m Match) MatchesPayload(p []byte) bool {
	start, value, mask, ok := m.PayloadWindow()
	if !ok {
		return true
	}
	for i := range PayloadWindow {
		if mask[i] == 0 {
			continue
		}
		pos := start + i
		if pos >= len(p) || p[pos]&mask[i] != value[i] {
			return false
		}
	}
	return true
}

// coversPayload: every packet b's payload items admit, a's admit too,
// exactly: a constrains no bit of the payload that b does not constrain
// to the same value. A packet's payload must be long enough for b's
// constrained bytes, so for a's too. (Fragments match both.)
func coversPayload(a, b Match) bool {
	aStart, aValue, aMask, ok := a.PayloadWindow()
	if !ok {
		return true
	}
	bStart, bValue, bMask, ok := b.PayloadWindow()
	if !ok {
		return false
	}
	for i := range PayloadWindow {
		if aMask[i] == 0 {
			continue
		}
		j := aStart + i - bStart
		if j < 0 || j >= PayloadWindow || aMask[i]&^bMask[j] != 0 || bValue[j]&aMask[i] != aValue[i] {
			return false
		}
	}
	return true
}

// payloadString renders the items for Match.String: "payload [0:
// deadbeef, 6: 0100/ff0f]".
func payloadString(items []PayloadMatch) string {
	s := make([]string, len(items))
	for i, it := range items {
		s[i] = it.String()
	}
	return "payload [" + strings.Join(s, ", ") + "]"
}

const payloadExample = `[{offset: 0, bytes: "deadbeef"}]`

// payload decodes a list of {offset, bytes, mask} items: bytes in hex at
// an offset from the start of the transport payload, compared under mask
// (all ones when absent). The items are returned sorted by offset, their
// bytes masked; together they must lie within PayloadWindow consecutive
// bytes and agree where they overlap.
func (d *decoder) payload(n ast.Node, path string) []PayloadMatch {
	var (
		items []PayloadMatch
		nodes []ast.Node // each item's node, for the checks across items
		paths []string
	)
	bad := false
	for i, e := range d.sequence(n, path, payloadExample) {
		epath := index(path, i)
		e = d.deref(e, epath)
		if e == nil {
			bad = true
			continue
		}
		switch e.(type) {
		case *ast.MappingNode, *ast.MappingValueNode: // the latter from older parsers, see mapping
		default:
			d.errorf(e, epath, "expected a mapping like {offset: 0, bytes: \"deadbeef\"}, got %s", describeNode(e))
			bad = true
			continue
		}
		it, ok := d.payloadItem(e, epath)
		if !ok {
			bad = true
			continue
		}
		items, nodes, paths = append(items, it), append(nodes, e), append(paths, epath)
	}
	if bad || len(items) == 0 {
		return nil
	}
	sorted := slices.Clone(items)
	slices.SortStableFunc(sorted, func(a, b PayloadMatch) int {
		return cmp.Or(cmp.Compare(a.Offset, b.Offset), cmp.Compare(len(a.Bytes), len(b.Bytes)))
	})

	lo, hi := sorted[0].Offset, 0
	for _, it := range sorted {
		hi = max(hi, it.Offset+len(it.Bytes))
	}
	if hi-lo > PayloadWindow {
		d.errorf(n, path, "payload items of one rule must lie within %d consecutive bytes (offsets %d to %d span %d)", PayloadWindow, lo, hi-1, hi-lo)
		return nil
	}
	ok := true
	for b := range items {
		for a := range b {
			if at, clash := payloadClash(items[a], items[b]); clash {
				d.errorf(nodes[b], paths[b], "payload items overlap at offset %d with different bytes; give each byte one value (use mask for the bits that matter)", at)
				ok = false
				break
			}
		}
	}
	if !ok {
		return nil
	}
	m := Match{Payload: sorted}
	if _, _, mask, _ := m.PayloadWindow(); mask == [PayloadWindow]byte{} {
		// Unreachable while every item's mask has a bit set; kept so that
		// a merged window never matches every packet.
		d.errorf(n, path, "payload mask is all zero: the items match every packet; leave payload out")
		return nil
	}
	return sorted
}

// payloadClash reports the first payload offset where items a and b both
// constrain a bit and disagree on it.
func payloadClash(a, b PayloadMatch) (int, bool) {
	for i := range a.Bytes {
		j := a.Offset + i - b.Offset
		if j < 0 || j >= len(b.Bytes) {
			continue
		}
		both := a.Mask[i] & b.Mask[j]
		if a.Bytes[i]&both != b.Bytes[j]&both {
			return a.Offset + i, true
		}
	}
	return 0, false
}

// payloadItem decodes one {offset, bytes, mask} mapping.
func (d *decoder) payloadItem(e ast.Node, path string) (PayloadMatch, bool) {
	before := len(d.errs)
	m := d.mapping(e, path, "offset", "bytes", "mask")
	if m == nil {
		return PayloadMatch{}, false
	}
	var it PayloadMatch
	if f, ok := m["offset"]; ok {
		it.Offset = d.payloadOffset(f.value, join(path, "offset"))
	} else {
		d.errorf(e, path, "offset is required: where the bytes start, counted from the start of the payload, e.g. {offset: 0, bytes: \"deadbeef\"}")
	}
	if f, ok := m["bytes"]; ok {
		it.Bytes = d.hexBytes(f.value, join(path, "bytes"), "bytes", "deadbeef")
	} else {
		d.errorf(e, path, "bytes is required: the bytes the payload holds at offset, in hex, e.g. {offset: 0, bytes: \"deadbeef\"}")
	}
	it.Mask = slices.Repeat([]byte{0xff}, len(it.Bytes))
	if f, ok := m["mask"]; ok {
		mpath := join(path, "mask")
		example := strings.Repeat("ff", max(len(it.Bytes)-1, 0)) + "0f"
		mask := d.hexBytes(f.value, mpath, "mask", example)
		switch {
		case mask == nil:
		case !slices.ContainsFunc(mask, func(b byte) bool { return b != 0 }):
			d.errorf(f.value, mpath, "mask is all zero, which matches every payload; set the bits that must match, or leave the item out")
		case it.Bytes == nil:
		case len(mask) != len(it.Bytes):
			d.errorf(f.value, mpath, "mask is %s but bytes is %s; give one mask byte per byte", nBytes(len(mask)), nBytes(len(it.Bytes)))
		default:
			it.Mask = mask
		}
	}
	for i := range it.Bytes {
		it.Bytes[i] &= it.Mask[i]
	}
	return it, len(d.errs) == before
}

// payloadOffset decodes an offset, 0 to MaxPayloadOffset.
func (d *decoder) payloadOffset(n ast.Node, path string) int {
	s, ok := d.scalar(n, path, "a payload offset")
	if !ok {
		return 0
	}
	v, err := strconv.Atoi(s)
	switch {
	case err != nil && !errors.Is(err, strconv.ErrRange):
		d.errorf(n, path, "%q is not an offset; use a number of bytes from the start of the payload, 0 to %d", s, MaxPayloadOffset)
	case err != nil || v < 0 || v > MaxPayloadOffset:
		d.errorf(n, path, "%q is out of range; payload offsets are 0 to %d", s, MaxPayloadOffset)
	default:
		return v
	}
	return 0
}

// hexBytes decodes 1 to PayloadWindow bytes written in hex, two digits a
// byte, with an optional 0x. The text is taken as written, so that an
// unquoted 0100, which YAML reads as a number, is the bytes 01 00. nil
// after an error.
func (d *decoder) hexBytes(n ast.Node, path, what, example string) []byte {
	s, ok := d.scalar(n, path, fmt.Sprintf("%s in hex like %q", what, example))
	if !ok {
		return nil
	}
	digits := s
	if len(s) >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') {
		digits = s[2:]
	}
	isHex := func(r rune) bool { return '0' <= r && r <= '9' || 'a' <= r && r <= 'f' || 'A' <= r && r <= 'F' }
	switch {
	case digits == "":
		d.errorf(n, path, "empty %s; write 1 to %d bytes in hex, like %q", what, PayloadWindow, example)
	case strings.IndexFunc(digits, func(r rune) bool { return !isHex(r) }) >= 0:
		d.errorf(n, path, "%q is not hex; write %s as hex digits, two digits a byte, like %q", s, what, example)
	case len(digits)%2 != 0:
		d.errorf(n, path, "%q has an odd number of hex digits; write two digits a byte, e.g. %q", s, "0"+digits)
	case len(digits)/2 > PayloadWindow:
		d.errorf(n, path, "%q is %d bytes; a payload item holds at most %d (one rule's items lie within %d consecutive bytes)", s, len(digits)/2, PayloadWindow, PayloadWindow)
	default:
		b, _ := hex.DecodeString(digits)
		return b
	}
	return nil
}

func nBytes(n int) string { return strconv.Itoa(n) + plural(n, " byte", " bytes") }
