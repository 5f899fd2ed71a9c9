// SPDX-License-Identifier: Apache-2.0

package maps_test

import (
	"fmt"
	"testing"

	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/maps"
)

// Aggregate levels are checked before the per-source table and nothing is
// charged for a refused packet: a source over its own limit does not spend
// the global budget, and a flood refused globally creates no per-source
// entries.
func TestAggregateLevels(t *testing.T) {
	l := load(t, maps.ClockMap, `
rules:
  - name: r
    limit: {algorithm: token_bucket, rate: 1/s, burst: 2}
    aggregate:
      - key: global
        limit: {algorithm: token_bucket, rate: 1/s, burst: 5}
`)
	heavy := udp4("192.0.2.1").MustBuild()
	// The heavy source gets its own 2; its 8 refused packets cost the
	// global bucket nothing, so 3 other sources still get the rest.
	if got := letters(repeatRun(t, l, heavy, 10)); got != "PPDDDDDDDD" {
		t.Fatalf("heavy source: %s", got)
	}
	var others []uint32
	for i := 2; i < 8; i++ {
		others = append(others, xdpltest.Run(t, l, udp4(fmt.Sprintf("192.0.2.%d", i)).MustBuild(), t0))
	}
	if got := letters(others); got != "PPPDDD" {
		t.Errorf("other sources after the heavy one: %s, want the global bucket's remaining 3", got)
	}
	stats, err := l.RuleStats()
	if err != nil {
		t.Fatal(err)
	}
	// Level drops are reported in policy order: 0 = own, 1 = the global.
	if d := stats[0].LevelDrops; d[0] != 8 || d[1] != 3 {
		t.Errorf("level drops %v, want [8 3]", d)
	}
	cs, err := l.Counters()
	if err != nil {
		t.Fatal(err)
	}
	// A limit of 1/s is below what an untracked key could pass, so keys
	// are tracked from their first packet: the heavy source's and the 3
	// admitted others'; the 3 refused by the global level never reached
	// the per-source table. The global level's state is its slot in
	// xdpl_globals, no table entry.
	if n := cs[maps.CounterNewSource].Packets; n != 4 {
		t.Errorf("%d state entries created, want 4", n)
	}
}

// TestGlobalLevelReload: a global level's state lives at a slot of
// xdpl_globals. A reload that keeps the level keeps its slot and so its
// bucket; a changed limit starts from a fresh one; a slot freed by one
// reload and taken by a new level at the next is zeroed first.
func TestGlobalLevelReload(t *testing.T) {
	policyWith := func(burst int) string {
		return fmt.Sprintf(`
rules:
  - name: r
    limit: {algorithm: token_bucket, rate: 1000000/s, burst: 1000000}
    aggregate:
      - key: global
        limit: {algorithm: token_bucket, rate: 1/s, burst: %d}
`, burst)
	}
	l := loadWith(t, maps.Options{Clock: maps.ClockMap}, policyWith(3))
	apply := func(yaml string) {
		if err := l.Apply(xdpltest.Compile(t, yaml)); err != nil {
			t.Fatal(err)
		}
	}
	flood := func(n int) string {
		var v []uint32
		for i := 1; i <= n; i++ {
			v = append(v, xdpltest.Run(t, l, udp4(fmt.Sprintf("192.0.2.%d", i)).MustBuild(), t0))
		}
		return letters(v)
	}
	if got := flood(5); got != "PPPDD" {
		t.Errorf("first policy: %s, want the global burst of 3", got)
	}
	apply(policyWith(3))
	if got := flood(2); got != "DD" {
		t.Errorf("after a reload that keeps the level: %s, want its spent bucket", got)
	}
	apply(policyWith(4))
	if got := flood(5); got != "PPPPD" {
		t.Errorf("after a reload that changes the limit: %s, want a fresh burst of 4", got)
	}
	// The level in force holds the second slot; the new one takes the
	// first, which still holds the spent bucket of the first policy.
	apply(policyWith(3))
	if got := flood(5); got != "PPPDD" {
		t.Errorf("a new level on a reused slot: %s, want a fresh burst of 3", got)
	}
}
