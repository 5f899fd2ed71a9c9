// SPDX-License-Identifier: Apache-2.0

package maps_test

import (
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

// A bench object replaces the embedded program (make bench-against): the
// committed build of this tree, loaded from its file, judges as the
// embedded one does. One that is missing, or asked for the stage
// benchmark's knobs it lacks, is refused.
func TestBenchObject(t *testing.T) {
	testutil.HostOnly(t, "reads the committed object from the source tree")
	object := filepath.Join("..", "gen", "xdplimit_bpfel.o")
	l := loadWith(t, maps.Options{Clock: maps.ClockMap, MaxSources: 1 << 12, BenchObject: object},
		"rules:\n  - name: r\n    limit: {algorithm: token_bucket, rate: 1/m, burst: 1}\n")
	frame := pktgen.UDP4(netip.MustParseAddr("192.0.2.7"), netip.MustParseAddr("10.0.0.1"), 4000, 53, 18)
	if v := xdpltest.Run(t, l, frame, time.Second); v != 2 {
		t.Fatalf("first packet: verdict %d, want pass", v)
	}
	if v := xdpltest.Run(t, l, frame, time.Second); v != 1 {
		t.Fatalf("second packet: verdict %d, want drop", v)
	}
	for _, c := range []struct {
		opts maps.Options
		want string
	}{
		{maps.Options{BenchObject: filepath.Join(t.TempDir(), "missing.o")}, "missing.o"},
		{maps.Options{BenchObject: object, BenchFloor: maps.FloorRefused}, "production build"},
	} {
		l, err := maps.Load(c.opts)
		if err == nil {
			l.Close()
			t.Errorf("%+v loaded", c.opts)
		} else if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want it to say %q", c.opts, err, c.want)
		}
	}
}
