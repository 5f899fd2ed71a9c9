// SPDX-License-Identifier: Apache-2.0

package loader_test

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/loader"
)

// The conversation checks judge only packets to this host's addresses:
// those must be in the datapath's table before a policy that turns a check
// on is in force, not only once the attach process's watch first reads the
// routing table. Attach and Reload fill it with the policy; a policy
// without checks leaves it alone.
func TestLocalAddressesBeforeTheChecks(t *testing.T) {
	addr := netip.MustParsePrefix("198.18.0.2/32") // the attached end's
	has := func(a *loader.Attachment) bool {
		t.Helper()
		got, err := a.Limiter.Local()
		if err != nil {
			t.Fatal(err)
		}
		return slices.Contains(got, addr)
	}
	withChecks := "conversations: {tcp: always}\nrules: []\n"
	without := "rules: []\n"

	img, _ := xdpltest.CompilePolicy(t, withChecks)
	_, a := xdpltest.AttachNative(t, "lca", loader.Config{Policy: loader.Policy{Image: img}})
	if !has(a) {
		t.Errorf("attached with the tcp check: %s not in the local table", addr)
	}

	img, _ = xdpltest.CompilePolicy(t, without)
	v, b := xdpltest.AttachNative(t, "lcb", loader.Config{Policy: loader.Policy{Image: img}})
	if has(b) {
		t.Errorf("attached without checks: %s in the local table", addr)
	}
	img, _ = xdpltest.CompilePolicy(t, withChecks)
	if err := v.PeerNS.Do(func() error { return b.Reload(loader.Policy{Image: img}) }); err != nil {
		t.Fatal(err)
	}
	if !has(b) {
		t.Errorf("reloaded with the tcp check: %s not in the local table", addr)
	}
}
