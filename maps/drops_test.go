package maps_test

import (
	"testing"

	"github.com/xdplimit/xdplimit/internal/xdpltest"
	"github.com/xdplimit/xdplimit/maps"
)

// The sample rate is the generation's: a reload that asks for every drop
// (log: sample: 1) gets every drop into the ring at once, and a reload back
// to the default one in 64.
func TestDropSampleRateFollowsReload(t *testing.T) {
	const rules = `
rules:
  - name: r
    limit: {algorithm: token_bucket, rate: 1/s, burst: 1}
`
	l := loadWith(t, maps.Options{Clock: maps.ClockMap}, rules+"log: {sample: 1}\n")
	pkt := udp4("192.0.2.7").MustBuild()
	count := func(n int) uint64 {
		t.Helper()
		_, _, cursor, err := l.DropRing(nil)
		if err != nil {
			t.Fatal(err)
		}
		repeatRun(t, l, pkt, n)
		_, written, _, err := l.DropRing(cursor)
		if err != nil {
			t.Fatal(err)
		}
		return written
	}
	xdpltest.Run(t, l, pkt, t0) // the one packet the burst admits
	if got := count(200); got != 200 {
		t.Errorf("sample: 1 sampled %d of 200 drops", got)
	}
	if err := l.Apply(xdpltest.Compile(t, rules)); err != nil {
		t.Fatal(err)
	}
	// 6400 drops at one in 64: 100 expected, standard deviation ~10.
	if got := count(6400); got < 60 || got > 140 {
		t.Errorf("the default sampled %d of 6400 drops, want about 100", got)
	}
}
