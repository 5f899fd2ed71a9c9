// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"fmt"
	"strconv"
)

// BanLimits is the bans: section: how far bans from outside the host (the
// fleet's Redis, ban feeds) may reach. Anyone who can write the fleet's Redis
// can offer a ban; these limits are what keeps one written field from
// banning the world on every host. `xdplimit ban` refuses a prefix wider
// than MinPrefix too, unless forced.
type BanLimits struct {
	// MinPrefixIPv4 and MinPrefixIPv6 are the shortest prefixes accepted:
	// a ban of a wider prefix is refused (0 accepts any, up to the whole
	// address family).
	MinPrefixIPv4, MinPrefixIPv6 int
	// MaxImported bounds the bans held from each outside source at once
	// (0: none are imported); never more than half the ban table, so that
	// imported bans cannot crowd out the rules' own.
	MaxImported int
	// MaxPerSync bounds the bans a source applies at one sync; the rest
	// wait for the next.
	MaxPerSync int
	// Set: the policy has a bans: section.
	Set bool
}

// Defaults and bounds of the bans: section.
const (
	DefaultBanMinPrefixIPv4 = 8
	DefaultBanMinPrefixIPv6 = 32
	DefaultBanMaxImported   = 10000
	DefaultBanMaxPerSync    = 1000
	maxBanImported          = 1 << 22 // the largest ban table --max-bans gets, in practice
	maxBanPerSync           = 100000
)

// DefaultBanLimits are the limits of a policy without a bans: section.
func DefaultBanLimits() BanLimits {
	return BanLimits{MinPrefixIPv4: DefaultBanMinPrefixIPv4, MinPrefixIPv6: DefaultBanMinPrefixIPv6,
		MaxImported: DefaultBanMaxImported, MaxPerSync: DefaultBanMaxPerSync}
}

// String renders the section as `policy check` prints it.
func (b BanLimits) String() string {
	return fmt.Sprintf("no wider than ipv4 /%d, ipv6 /%d; at most %d held, %d applied per sync",
		b.MinPrefixIPv4, b.MinPrefixIPv6, b.MaxImported, b.MaxPerSync)
}

// banLimits decodes the top-level bans: section:
//
//	bans: {min_prefix: {ipv4: 8, ipv6: 32}, max_imported: 10000, max_per_sync: 1000}
func (d *decoder) banLimits(f field) BanLimits {
	b := DefaultBanLimits()
	b.Set = true
	m := d.mapping(f.value, "bans", "min_prefix", "max_imported", "max_per_sync")
	if m == nil {
		return b
	}
	if pf, ok := m["min_prefix"]; ok {
		pm := d.mapping(pf.value, "bans.min_prefix", "ipv4", "ipv6")
		for _, c := range []struct {
			name string
			max  int
			dst  *int
		}{{"ipv4", 32, &b.MinPrefixIPv4}, {"ipv6", 128, &b.MinPrefixIPv6}} {
			if vf, ok := pm[c.name]; ok {
				d.boundedInt(vf, "bans.min_prefix", c.name, "a prefix length", 0, c.max, c.dst)
			}
		}
	}
	if vf, ok := m["max_imported"]; ok {
		d.boundedInt(vf, "bans", "max_imported", "a whole number of bans", 0, maxBanImported, &b.MaxImported)
	}
	if vf, ok := m["max_per_sync"]; ok {
		d.boundedInt(vf, "bans", "max_per_sync", "a whole number of bans", 1, maxBanPerSync, &b.MaxPerSync)
	}
	return b
}

// boundedInt decodes field name of the mapping at path, a whole number
// from lo to hi, into dst; dst keeps its value on an error.
func (d *decoder) boundedInt(f field, path, name, what string, lo, hi int, dst *int) {
	path = join(path, name)
	s, ok := d.scalar(f.value, path, what)
	if !ok {
		return
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < lo || v > hi {
		d.errorf(f.value, path, "%s %q: %s from %d to %d", name, s, what, lo, hi)
		return
	}
	*dst = v
}
