// SPDX-License-Identifier: Apache-2.0

package xdpltest

import (
	"testing"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/loader"
)

// AttachNative makes a veth pair named tag+"s" and tag+"r", each made unique
// to this process (testutil.NewUniqueVethPair), attaches cfg natively to the
// second end, in its namespace, and detaches when the test ends (before the
// pair goes). cfg.Interface and cfg.Mode are set here; a nil cfg.Warn logs
// to the test. For the end-to-end tests of what reads a running attach
// (metrics, the drop log).
func AttachNative(t *testing.T, tag string, cfg loader.Config) (*testutil.Veth, *loader.Attachment) {
	t.Helper()
	v := testutil.NewUniqueVethPair(t, tag+"s", tag+"r")
	cfg.Interface, cfg.Mode = v.PeerName, loader.ModeNative
	if cfg.Warn == nil {
		cfg.Warn = func(s string) { t.Log("attach:", s) }
	}
	var a *loader.Attachment
	err := v.PeerNS.Do(func() error {
		var err error
		a, err = loader.Attach(cfg)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Detach(); err != nil {
			t.Errorf("detach: %v", err)
		}
	})
	return v, a
}
