// SPDX-License-Identifier: Apache-2.0

package fleet_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/banfeed"
	"github.com/xdplimit/xdplimit/internal/harness/fleetsim"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/pktgen"
)

// A ban a rule starts on one host is enforced by every host at its next
// sync after the banning host's (one sync interval), and an unban on
// another host ends it everywhere; a manual ban travels the same way.
func TestFleetBans(t *testing.T) {
	b := newBanFleet(t)
	for i, want := range []bool{true, true, false} {
		if got := b.send(0); got != want {
			t.Fatalf("host 0 packet %d: admitted %v, want %v", i, got, want)
		}
	}
	if !b.send(1) {
		t.Fatal("host 1 dropped the source before any sync")
	}
	b.sync()
	for h := range b.f.Hosts {
		if b.send(h) {
			t.Errorf("host %d admitted the source banned on host 0", h)
		}
	}
	bans, err := b.f.Hosts[2].L.Bans()
	if err != nil || len(bans) != 1 || bans[0].Prefix != netip.PrefixFrom(src, 32) || bans[0].Left < 59*time.Second {
		t.Fatalf("host 2 bans %+v (%v)", bans, err)
	}

	// Unbanned on host 2: every host admits the source again.
	if ok, err := b.f.Hosts[2].L.Unban(netip.PrefixFrom(src, 32)); err != nil || !ok {
		t.Fatalf("unban: %v %v", ok, err)
	}
	// Past host 0's window too, where its own limit would ban again.
	b.f.Advance(10 * time.Second)
	b.sync()
	b.sync() // hosts that synced before host 2 learn it now
	for h := range b.f.Hosts {
		if !b.send(h) {
			t.Errorf("host %d still drops the source unbanned on host 2", h)
		}
	}

	// A manual ban on host 1 reaches the others.
	manual := netip.MustParsePrefix("203.0.113.0/24")
	if _, err := b.f.Hosts[1].L.Ban(manual, time.Hour, "abuse desk"); err != nil {
		t.Fatal(err)
	}
	b.sync()
	b.sync() // host 0 synced before host 1 pushed it
	other := pktgen.UDP4(netip.MustParseAddr("203.0.113.5"), dst, 4000, 53, 10)
	for h := range b.f.Hosts {
		if ok, err := b.f.Hosts[h].Send(other); err != nil || ok {
			t.Errorf("host %d: admitted %v (%v), want the manual ban of host 1 enforced", h, ok, err)
		}
	}
}

// banFleet is three hosts whose rule bans a source for a minute at its
// third SYN to port 22 in 10s.
type banFleet struct {
	t   *testing.T
	f   *fleetsim.Fleet
	ctx context.Context
}

func newBanFleet(t *testing.T) *banFleet {
	r, ns := startRedis(t)
	f, _ := newHosts(t, testutil.DialIn(ns), 3, fmt.Sprintf(`
fleet:
  redis: redis://%s/0
  namespace: b%d
  sync: 100ms
rules:
  - name: ssh
    match: {protocol: tcp, dst_ports: [22]}
    limit: {algorithm: fixed_window, packets: 2, window: 10s}
    action: ban
    ban: {for: 1m}
`, r.Addr(), time.Now().UnixNano()))
	return &banFleet{t: t, f: f, ctx: context.Background()}
}

// banSYN is the source's SYN the rule counts.
var banSYN = pktgen.TCP4(src, dst, 40000, 22, pktgen.TCPSyn, 0)

// send sends the SYN to host h: whether it admitted it.
func (b *banFleet) send(h int) bool {
	b.t.Helper()
	ok, err := b.f.Hosts[h].Send(banSYN)
	if err != nil {
		b.t.Fatal(err)
	}
	return ok
}

// clockTick is a packet no rule matches. fleetsim.Fleet writes a host's
// injected clock when it runs a packet; the ban table reads it: the tick
// brings every host's clock to now before each sync, as a real clock
// would be.
var clockTick = pktgen.UDP4(netip.MustParseAddr("192.0.2.99"), dst, 4000, 9, 10)

// sync advances the fleet one interval and syncs every host.
func (b *banFleet) sync() {
	b.t.Helper()
	b.f.Advance(100 * time.Millisecond)
	for _, h := range b.f.Hosts {
		if _, err := h.Send(clockTick); err != nil {
			b.t.Fatal(err)
		}
	}
	if err := b.f.SyncAll(b.ctx); err != nil {
		b.t.Fatal(err)
	}
}

// A ban of a host's own feed (its CrowdSec bouncer) stays on that host:
// not pushed to the others, not replaced by the fleet's ban of the same
// prefix, and not lifted when the fleet's ends.
func TestFleetLeavesHostFeedBans(t *testing.T) {
	r, ns := startRedis(t)
	f, _ := newHosts(t, testutil.DialIn(ns), 2, fmt.Sprintf(`
fleet:
  redis: redis://%s/0
  namespace: hf%d
  sync: 100ms
rules: []
`, r.Addr(), time.Now().UnixNano()))
	ctx := context.Background()
	sync := func() {
		t.Helper()
		for range 2 { // each host hears of the other's push
			if err := f.SyncAll(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	own := netip.MustParsePrefix("198.51.100.0/24")
	reason, _ := banfeed.Reason(banfeed.CrowdSec, "cscli/ssh-bf", "ban 7")
	if _, err := f.Hosts[0].L.Ban(own, time.Hour, reason); err != nil {
		t.Fatal(err)
	}
	sync()
	if bans, err := f.Hosts[1].L.Bans(); err != nil || len(bans) != 0 {
		t.Fatalf("host 1 holds %+v (%v): host 0's CrowdSec ban was shared", bans, err)
	}
	// Host 1 bans the same prefix by hand, for less time: the fleet shares
	// it, and host 0 keeps its own ban, reason and end.
	if _, err := f.Hosts[1].L.Ban(own, time.Minute, "abuse desk"); err != nil {
		t.Fatal(err)
	}
	sync()
	bans, err := f.Hosts[0].L.Bans()
	if err != nil || len(bans) != 1 || bans[0].Reason != reason || bans[0].Left < 59*time.Minute {
		t.Fatalf("host 0 bans %+v (%v): want its CrowdSec ban as it was", bans, err)
	}
	// Host 1 lifts its ban: the fleet's unban leaves host 0's alone.
	if _, err := f.Hosts[1].L.Unban(own); err != nil {
		t.Fatal(err)
	}
	sync()
	if bans, err := f.Hosts[0].L.Bans(); err != nil || len(bans) != 1 || bans[0].Reason != reason {
		t.Fatalf("host 0 bans %+v (%v) after the fleet's unban", bans, err)
	}
}
