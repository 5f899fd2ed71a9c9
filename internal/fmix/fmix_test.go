// SPDX-License-Identifier: Apache-2.0

package fmix

import "testing"

// Known values of murmur3's fmix64 (0 is its fixed point).
func TestFmix64(t *testing.T) {
	for in, want := range map[uint64]uint64{0: 0, 1: 0xb456bcfc34c2cb2c} {
		if got := Fmix64(in); got != want {
			t.Errorf("Fmix64(%#x) = %#x, want %#x", in, got, want)
		}
	}
}
