// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"strings"
)

// parsePrefix parses a CIDR or a bare address (a /32 or /128). IPv4-mapped
// IPv6 becomes IPv4, because the datapath keys IPv4 packets by their 4-byte
// address. It returns the masked prefix and, when the text had host bits
// set, a warning saying what it was masked to.
func parsePrefix(s string) (p netip.Prefix, warn string, err error) {
	bad := fmt.Errorf("%q is not an IP address or CIDR (like 192.0.2.0/24 or 2001:db8::/32)", s)
	if strings.Contains(s, "%") {
		return p, "", fmt.Errorf("%q has an IPv6 zone; zones are not allowed", s)
	}
	if strings.Contains(s, "/") {
		p, err = netip.ParsePrefix(s)
		if err != nil {
			return p, "", bad
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return p, "", bad
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	m := p.Masked()
	if m != p {
		warn = fmt.Sprintf("%s is masked to %s", s, m)
	}
	return m, warn, nil
}

func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}

// family is a set of IP versions, as a bit mask.
type family uint8

const (
	fam4   family = 1
	fam6   family = 2
	famAll        = fam4 | fam6
)

func familyOf(p netip.Prefix) family {
	if p.Addr().Is4() {
		return fam4
	}
	return fam6
}

// familiesOf is the families a CIDR constraint admits; an absent one admits both.
func familiesOf(ps []netip.Prefix) family {
	if len(ps) == 0 {
		return famAll
	}
	var f family
	for _, p := range ps {
		f |= familyOf(p)
	}
	return f
}

// coveredBy reports whether every address of p is in the union of set. When
// no single prefix of set contains p, the prefixes inside p must tile it:
// after dropping nested ones they are disjoint, so their sizes add up to
// p's size exactly when they cover it.
func coveredBy(p netip.Prefix, set []netip.Prefix) bool {
	var inside []netip.Prefix
	for _, q := range set {
		if q.Addr().BitLen() != p.Addr().BitLen() {
			continue
		}
		if q.Bits() <= p.Bits() && q.Contains(p.Addr()) {
			return true
		}
		if p.Contains(q.Addr()) {
			inside = append(inside, q)
		}
	}
	slices.SortFunc(inside, comparePrefix)
	total := new(big.Int)
	var last netip.Prefix
	for _, q := range inside {
		if last.IsValid() && last.Contains(q.Addr()) {
			continue // nested in the previous one: already counted
		}
		last = q
		total.Add(total, new(big.Int).Lsh(big.NewInt(1), uint(q.Addr().BitLen()-q.Bits())))
	}
	want := new(big.Int).Lsh(big.NewInt(1), uint(p.Addr().BitLen()-p.Bits()))
	return total.Cmp(want) == 0
}

// universe is the CIDR set "any address" restricted to the families f.
func universe(f family) []netip.Prefix {
	var u []netip.Prefix
	if f&fam4 != 0 {
		u = append(u, netip.MustParsePrefix("0.0.0.0/0"))
	}
	if f&fam6 != 0 {
		u = append(u, netip.MustParsePrefix("::/0"))
	}
	return u
}
