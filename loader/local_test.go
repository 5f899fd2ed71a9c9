// SPDX-License-Identifier: Apache-2.0

package loader

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/maps"
)

// The conversation checks judge only packets to this host's addresses:
// those must be in the datapath's table before a policy that turns a check
// on is in force, not only once the attach process's watch first reads the
// routing table. Attach and Reload write the image withHost fitted, which
// carries them; a policy without checks carries none. No XDP program is
// attached here: under emulation, attaching one beside another test binary's
// XDP test runs has crashed the guest (the dispatcher patched under them).
func TestLocalAddressesBeforeTheChecks(t *testing.T) {
	v := testutil.NewVethPair(t, testutil.VethConfig{})
	addr := netip.MustParsePrefix("198.18.0.2/32") // the peer end's, in its namespace
	fit := func(img *maps.Image) *maps.Image {
		t.Helper()
		var out *maps.Image
		if err := v.PeerNS.Do(func() (err error) {
			out, err = withHost(img, v.PeerName, 1500)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	checks := &maps.Image{Conversations: maps.Conversations{TCP: maps.ConvCheck{On: true}}}
	if got := fit(checks).Local; !slices.Contains(got, addr) {
		t.Errorf("a policy with the tcp check carries %v, want %s among them", got, addr)
	}
	if got := fit(&maps.Image{}).Local; got != nil {
		t.Errorf("a policy without checks carries local addresses %v", got)
	}
}
