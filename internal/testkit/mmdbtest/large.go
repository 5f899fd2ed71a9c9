// SPDX-License-Identifier: Apache-2.0

package mmdbtest

import (
	"net/netip"

	"github.com/maxmind/mmdbwriter"
)

// The large country database of the GeoIP scale test: LargeV4 IPv4 /24s and
// LargeV6 IPv6 /40s over the countries of LargeCodes, scattered so that
// little merges.
const LargeV4, LargeV6 = 400_000, 100_000

// LargeCodes are the large database's 234 country codes, AA to ZI.
func LargeCodes() []string {
	var codes []string
	for a := 'A'; a <= 'Z'; a++ {
		for b := 'A'; b <= 'I'; b++ {
			codes = append(codes, string([]rune{a, b}))
		}
	}
	return codes
}

// WriteLarge writes the large country database to path. Writing it takes
// seconds on a host and minutes on an emulated CPU, so the VM suite gets it
// written on the host (genlarge) and the test reads that copy; both come
// from this function.
func WriteLarge(path string) error {
	codes := LargeCodes()
	of := func(i int) string { return codes[int(uint32(i)*2654435761>>8)%len(codes)] }
	tree, err := mmdbwriter.New(options("GeoLite2-Country"))
	if err != nil {
		return err
	}
	add := func(p netip.Prefix, code string) error { return insert(tree, p, Country(code, code)) }
	for i := range LargeV4 {
		x := uint32(i) * 41 % (1 << 24) // a permutation of the /24s
		if err := add(netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(x >> 16), byte(x >> 8), byte(x), 0}), 24), of(i)); err != nil {
			return err
		}
	}
	for i := range LargeV6 {
		p := netip.PrefixFrom(netip.AddrFrom16([16]byte{0x2a, 0x00, byte(i >> 16), byte(i >> 8), byte(i)}), 40)
		if err := add(p, of(LargeV4+i)); err != nil {
			return err
		}
	}
	return write(tree, path)
}
