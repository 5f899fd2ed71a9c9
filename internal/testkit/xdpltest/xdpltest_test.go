// SPDX-License-Identifier: Apache-2.0

package xdpltest_test

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/loader"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

const burst1 = "rules:\n  - name: r\n    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}\n"

// Load applies the policy and Run sets the clock it judges at: a burst of
// one passes one packet, drops the next, and passes again a second later.
func TestLoadRun(t *testing.T) {
	l := xdpltest.Load(t, maps.Options{Clock: maps.ClockMap, MaxSources: 1 << 10}, burst1)
	frame := pktgen.UDP4(netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("10.0.0.1"), 4000, 53, 0)
	var got []uint32
	for _, at := range []time.Duration{10 * time.Second, 10 * time.Second, 11 * time.Second} {
		got = append(got, xdpltest.Run(t, l, frame, at))
	}
	if got[0] != 2 || got[1] != 1 || got[2] != 2 {
		t.Errorf("verdicts %v, want [2 1 2] (pass, drop, pass)", got)
	}
}

// AttachNative attaches to the second end of its pair, and the test's
// cleanup detaches and removes the pins before the pair goes.
func TestAttachNative(t *testing.T) {
	var pins string
	t.Run("attached", func(t *testing.T) {
		v, a := xdpltest.AttachNative(t, "xk", loader.Config{MaxSources: 1 << 10,
			Policy: loader.Policy{Image: xdpltest.Compile(t, burst1), Path: "test.yaml"}})
		if a.Interface != v.PeerName {
			t.Errorf("attached to %s, want the pair's second end %s", a.Interface, v.PeerName)
		}
		pins = filepath.Join(loader.PinRoot, a.Interface)
		if _, err := os.Stat(pins); err != nil {
			t.Errorf("no pins while attached: %v", err)
		}
	})
	if pins == "" {
		return // the subtest was skipped or failed before attaching
	}
	if _, err := os.Stat(pins); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still there after the test (err %v)", pins, err)
	}
}
