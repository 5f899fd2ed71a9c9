// SPDX-License-Identifier: Apache-2.0

package fleet

import (
	"errors"
	"strings"
	"testing"

	"github.com/xdplimit/xdplimit/maps"
)

// The stream of crossings is written by anyone who can write the fleet's
// Redis: an entry names a key of a level this host runs, exactly as this
// host writes it, or it is skipped.
func TestParseMember(t *testing.T) {
	src := &level{FleetLevel: maps.FleetLevel{StateID: 7}, name: "dns/0/abc"}
	glob := &level{FleetLevel: maps.FleetLevel{StateID: 9, Global: true}, name: "all/1/def"}
	byName := map[string]*level{src.name: src, glob.name: glob}
	for _, m := range []string{"dns/0/abc|198.51.100.7", "dns/0/abc|2001:db8::1#53", "all/1/def|global"} {
		k, err := parseMember(m, byName)
		if err != nil {
			t.Errorf("%q: %v", m, err)
			continue
		}
		lv := byName[m[:strings.LastIndexByte(m, '|')]]
		if back := lv.name + "|" + keyString(k, lv.Global); back != m {
			t.Errorf("%q read back as %q", m, back)
		}
	}
	for _, m := range []string{
		"", "no-bar", "other/0/xyz|198.51.100.7", "dns/0/abc|global", "all/1/def|198.51.100.7",
		"dns/0/abc|198.51.100.7#0", "dns/0/abc|198.51.100.7#70000",
		"dns/0/abc|fe80::1%eth0", "dns/0/abc|0198.51.100.7", "dns/0/abc|" + strings.Repeat("1", 400),
	} {
		if _, err := parseMember(m, byName); !errors.Is(err, errBadEntry) {
			t.Errorf("%q: got %v, want it skipped", m, err)
		}
	}
}
