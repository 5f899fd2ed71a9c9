// SPDX-License-Identifier: Apache-2.0

package maps

import "testing"

// A packet without payload satisfies only the rules that read no window:
// the cookie ACK check classifies its connection's SYN by that bitmap.
func TestPayloadEmpty(t *testing.T) {
	var a, b Bitmap
	a.W[0] = 0b1011 // rule 2 reads window a
	b.W[0] = 0b0111 // rule 3 reads window b
	got := payloadEmpty([]PayloadShape{{Absent: a}, {Absent: b}})
	if got.W[0] != 0b0011 || got.W[1] != 0 {
		t.Errorf("empty %#x %#x, want only rules 0 and 1", got.W[0], got.W[1])
	}
}
