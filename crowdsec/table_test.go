// SPDX-License-Identifier: Apache-2.0

package crowdsec

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/banfeed"
	"github.com/xdplimit/xdplimit/maps"
)

func newBan(id int64, prefix string, left time.Duration, scenario string) Ban {
	return Ban{ID: id, Prefix: mustPrefix(prefix), Left: left, Type: "ban", Origin: "cscli", Scenario: scenario}
}

func gone(id int64, prefix string) Ban {
	return Ban{ID: id, Prefix: mustPrefix(prefix), Type: "ban", Origin: "cscli"}
}

func mustApply(t *testing.T, tgt *fakeTarget, b Batch) Applied {
	t.Helper()
	res, err := tgt.Apply(b)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// Two decisions on one prefix: the ban is the one that ends last's, and
// deleting either leaves the prefix banned while the other lasts.
func TestTableDecisionsOnOnePrefix(t *testing.T) {
	tgt := newFakeTarget(t)
	mustApply(t, tgt, Batch{New: []Ban{newBan(1, "192.0.2.1/32", 4*time.Hour, "long")}})
	mustApply(t, tgt, Batch{New: []Ban{newBan(2, "192.0.2.1/32", time.Hour, "short")}})
	b, _ := tgt.ban("192.0.2.1/32")
	if !hasReasonPrefix(b, "cscli", "long") || b.Left < 3*time.Hour {
		t.Fatalf("after a shorter decision: %+v, want the 4 h one's", b)
	}
	if res := mustApply(t, tgt, Batch{Deleted: []Ban{gone(2, "192.0.2.1/32")}}); res.NotHeld != 1 || res.Unbanned != 0 {
		t.Fatalf("deleting the shorter: %+v", res)
	}
	mustApply(t, tgt, Batch{New: []Ban{newBan(3, "192.0.2.1/32", time.Hour, "short")}})
	// The longer one goes: the shorter one's ban takes its place.
	if res := mustApply(t, tgt, Batch{Deleted: []Ban{gone(1, "192.0.2.1/32")}}); res.Banned != 1 || res.NotHeld != 1 {
		t.Fatalf("deleting the longer: %+v", res)
	}
	b, _ = tgt.ban("192.0.2.1/32")
	if !hasReasonPrefix(b, "cscli", "short") || b.Left > time.Hour {
		t.Fatalf("after the longer went: %+v", b)
	}
	if res := mustApply(t, tgt, Batch{Deleted: []Ban{gone(3, "192.0.2.1/32")}}); res.Unbanned != 1 {
		t.Fatalf("deleting the last: %+v", res)
	}
	expectHeld(t, tgt)
	// A prefix written twice (as the LAPI may: 192.0.2.0/24 and
	// ::ffff:192.0.2.0/120) is one prefix.
	mustApply(t, tgt, Batch{New: []Ban{newBan(4, "192.0.2.0/24", time.Hour, "a"), newBan(5, "::ffff:192.0.2.9/120", 2*time.Hour, "b")}})
	b, _ = tgt.ban("192.0.2.0/24")
	if !hasReasonPrefix(b, "cscli", "b") {
		t.Fatalf("%+v", b)
	}
	expectHeld(t, tgt, "192.0.2.0/24")
}

// Another writer's ban is never ended by a deletion, and one that lasts
// longer than the decision keeps the prefix; a shorter one is extended.
func TestTableOtherOrigins(t *testing.T) {
	tgt := newFakeTarget(t)
	tgt.set("192.0.2.1/32", 10*time.Hour, "by hand")
	tgt.set("192.0.2.2/32", time.Minute, "fleet: h1 rule: r")
	res := mustApply(t, tgt, Batch{New: []Ban{newBan(1, "192.0.2.1/32", time.Hour, "x"), newBan(2, "192.0.2.2/32", time.Hour, "y")}})
	if res.Banned != 1 {
		t.Fatalf("%+v", res)
	}
	if b, _ := tgt.ban("192.0.2.1/32"); b.Reason != "by hand" {
		t.Errorf("the longer manual ban was replaced: %+v", b)
	}
	if b, _ := tgt.ban("192.0.2.2/32"); !hasReasonPrefix(b, "cscli", "y") || b.Left < 59*time.Minute {
		t.Errorf("the shorter fleet ban was not extended: %+v", b)
	}
	if tgt.Pending() != 1 {
		t.Errorf("%d pending, want the prefix the manual ban holds", tgt.Pending())
	}
	res = mustApply(t, tgt, Batch{Deleted: []Ban{gone(1, "192.0.2.1/32")}})
	if res.NotHeld != 1 || res.Unbanned != 0 || tgt.Pending() != 0 {
		t.Fatalf("%+v, %d pending", res, tgt.Pending())
	}
	if _, ok := tgt.ban("192.0.2.1/32"); !ok {
		t.Error("a deletion ended the manual ban")
	}
	// The manual ban ends (unbanned by hand): the decision's ban takes
	// over at the next round.
	tgt.set("192.0.2.3/32", 2*time.Hour, "by hand")
	if res := mustApply(t, tgt, Batch{New: []Ban{newBan(3, "192.0.2.3/32", time.Hour, "z")}}); res.Banned != 0 {
		t.Fatalf("%+v", res)
	}
	if _, err := tgt.UnbanAll([]netip.Prefix{mustPrefix("192.0.2.3/32")}); err != nil {
		t.Fatal(err)
	}
	if res := mustApply(t, tgt, Batch{}); res.Banned != 1 {
		t.Fatalf("%+v", res)
	}
	if b, _ := tgt.ban("192.0.2.3/32"); !hasReasonPrefix(b, "cscli", "z") {
		t.Errorf("%+v", b)
	}
}

// bans.max_per_sync and bans.max_imported bound each round; what waits is
// applied by the following rounds, also without new decisions.
func TestTableBudget(t *testing.T) {
	tgt := newFakeTarget(t)
	tgt.limits(maps.BanLimits{MinPrefix4: 8, MinPrefix6: 32, MaxImported: 7, MaxPerSync: 3})
	var news []Ban
	for i := range 10 {
		news = append(news, newBan(int64(i), fmt.Sprintf("198.51.100.%d/32", i), time.Hour, "s"))
	}
	for i, want := range []int{3, 3, 1, 0} {
		var b Batch
		if i == 0 {
			b.New = news
		}
		if res := mustApply(t, tgt, b); res.Banned != want {
			t.Fatalf("round %d: %+v, want %d banned", i, res, want)
		}
	}
	if n := len(tgt.held()); n != 7 || tgt.Pending() != 3 {
		t.Fatalf("%d held, %d pending; want 7 (max_imported) and 3", n, tgt.Pending())
	}
	if l := tgt.gateLog.String(); !strings.Contains(l, "max_per_sync") || !strings.Contains(l, "max_imported") {
		t.Errorf("gate log: %s", l)
	}
	// Some end: the rest come in.
	mustApply(t, tgt, Batch{Deleted: []Ban{gone(0, "198.51.100.0/32"), gone(1, "198.51.100.1/32")}})
	if n := len(tgt.held()); n != 7 || tgt.Pending() != 1 {
		t.Fatalf("%d held, %d pending; want 7 and 1", n, tgt.Pending())
	}
}

// The gate refuses what the policy's bans: section does not allow, each
// once, and a ban the datapath refuses is tried again at the next round.
func TestTableRefusals(t *testing.T) {
	tgt := newFakeTarget(t)
	tgt.failBan[mustPrefix("192.0.2.9/32")] = true
	b := Batch{New: []Ban{newBan(1, "0.0.0.0/0", time.Hour, "w"), newBan(2, "::ffff:10.0.0.0/100", time.Hour, "w"),
		newBan(3, "192.0.2.1/32", 60*24*time.Hour, "l"), newBan(4, "192.0.2.9/32", time.Hour, "d"),
		newBan(5, "192.0.2.10/32", 30*24*time.Hour, "max")}}
	for range 2 {
		mustApply(t, tgt, b)
	}
	for k, n := range map[banfeed.Kind]int{banfeed.TooWide: 2, banfeed.TooLong: 1, banfeed.Datapath: 1} {
		if got := tgt.refused(t, k); got != n {
			t.Errorf("refused %s: %d, want %d", k, got, n)
		}
	}
	expectHeld(t, tgt, "192.0.2.10/32")
	delete(tgt.failBan, mustPrefix("192.0.2.9/32"))
	if res := mustApply(t, tgt, Batch{}); res.Banned != 1 {
		t.Fatalf("the refused ban was not tried again: %+v", res)
	}
	expectHeld(t, tgt, "192.0.2.10/32", "192.0.2.9/32")
}

// After a restart of the daemon the Table knows nothing: a deletion in the
// first (startup) answer ends the CrowdSec ban on its prefix unless a
// decision in force there comes in the same answer; bans it is not told
// about stay.
func TestTableAfterRestart(t *testing.T) {
	tgt := newFakeTarget(t)
	tgt.set("192.0.2.1/32", time.Hour, reasonOf("cscli", "old", "ban", 1))
	tgt.set("192.0.2.2/32", time.Hour, reasonOf("cscli", "old", "ban", 2))
	tgt.set("192.0.2.3/32", time.Hour, reasonOf("cscli", "old", "ban", 3))
	res := mustApply(t, tgt, Batch{Startup: true, Deleted: []Ban{gone(1, "192.0.2.1/32"), gone(2, "192.0.2.2/32")},
		New: []Ban{newBan(7, "192.0.2.2/32", time.Hour, "new")}})
	if res.Unbanned != 1 || res.Banned != 1 || res.NotHeld != 1 {
		t.Fatalf("%+v", res)
	}
	expectHeld(t, tgt, "192.0.2.2/32", "192.0.2.3/32")
}
