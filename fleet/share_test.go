// SPDX-License-Identifier: Apache-2.0

package fleet_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/fleet"
	"github.com/xdplimit/xdplimit/internal/harness/fleetsim"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

// Local shares, on the simulated fleet: keys below their share never reach
// Redis; a key above it is held to the fleet limit, also when only one host
// sees it above its share; a key that calms down leaves the exchange.

// stream is one source's packets to one host: one every `every`, the first
// at offset.
type stream struct {
	host          int
	pkt           []byte
	every, offset time.Duration
	sent, passed  int
}

// due is how many of the stream's packets fall in [at, at+step).
func (s *stream) due(at, step time.Duration) int {
	n := func(t time.Duration) int64 {
		if t <= s.offset {
			return 0
		}
		return int64((t-s.offset-1)/s.every) + 1
	}
	return int(n(at+step) - n(at))
}

// drive runs the streams for dur in 1 ms steps, every host syncing every
// sync, and returns each sync's results (all hosts').
func drive(t *testing.T, f *fleetsim.Fleet, streams []*stream, dur, sync time.Duration) []fleet.SyncResult {
	t.Helper()
	var res []fleet.SyncResult
	for at := time.Duration(0); at < dur; at += time.Millisecond {
		for _, s := range streams {
			for range s.due(at, time.Millisecond) {
				ok, err := f.Hosts[s.host].Send(s.pkt)
				if err != nil {
					t.Fatal(err)
				}
				s.sent++
				if ok {
					s.passed++
				}
			}
		}
		f.Advance(time.Millisecond)
		if (at+time.Millisecond)%sync == 0 {
			for i, h := range f.Hosts {
				r := h.E.Sync(context.Background())
				if r.Err != nil {
					t.Fatalf("host %d: sync: %v", i, r.Err)
				}
				res = append(res, r)
			}
		}
	}
	return res
}

func sharePolicy(addr, fleetExtra string) string {
	return fmt.Sprintf(`
fleet:
  redis: redis://%s/0
  namespace: s%d
  sync: 100ms
%srules:
  - name: dns
    match: {protocol: udp, dst_ports: [53]}
    limit: {algorithm: token_bucket, rate: 100/s, burst: 100, scope: fleet}
`, addr, time.Now().UnixNano(), fleetExtra)
}

// lightStreams: n sources, each sending to every host one packet every
// `every`, spread over it.
func lightStreams(n, hosts int, every time.Duration) []*stream {
	var out []*stream
	for i := range n {
		a := netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)})
		pkt := pktgen.UDP4(a, dst, 4000, 53, 16)
		for h := range hosts {
			out = append(out, &stream{host: h, pkt: pkt, every: every,
				offset: time.Duration(i*hosts+h) * every / time.Duration(n*hosts)})
		}
	}
	return out
}

func passed(streams []*stream) (sent, passed int) {
	for _, s := range streams {
		sent, passed = sent+s.sent, passed+s.passed
	}
	return sent, passed
}

var lightN = 200

func TestFleetShareLightKeysStayOut(t *testing.T) {
	testutil.HostOnly(t, "the simulation's clock runs slower than the real time in which Redis expires keys")
	r, ns := startRedis(t)
	for _, tc := range []struct {
		name    string
		extra   string
		senders []int
	}{
		{"heavy on three hosts", "", []int{0, 1, 2}},
		{"heavy on one host", "", []int{1}},
		{"share off, heavy on three hosts", "  share: off\n", []int{0, 1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, _ := newHosts(t, testutil.DialIn(ns), 3, sharePolicy(r.Addr(), tc.extra))
			light := lightStreams(lightN, 3, 500*time.Millisecond)
			var heavy []*stream
			hp := pktgen.UDP4(src, dst, 4000, 53, 16)
			for _, h := range tc.senders {
				// 10x the fleet's rate, all senders together.
				heavy = append(heavy, &stream{host: h, pkt: hp, every: time.Duration(len(tc.senders)) * time.Millisecond})
			}
			const dur = 5 * time.Second
			res := drive(t, f, append(light, heavy...), dur, 100*time.Millisecond)
			sent, ok := passed(light)
			if ok != sent {
				t.Errorf("light keys: %d of %d packets refused", sent-ok, sent)
			}
			_, got := passed(heavy)
			within(t, tc.name, got, 100+100*dur.Seconds(), 0.05)
			// After the first two syncs (the fleet met, the keys reported
			// before it left the exchange): only the heavy key is exchanged.
			most := 0
			for _, r := range res[6:] {
				most = max(most, r.Exchanged)
			}
			t.Logf("keys exchanged per sync and host after the first two: at most %d", most)
			if tc.extra == "" && most > 1 {
				t.Errorf("a sync exchanged %d keys: the light keys are within their share", most)
			}
			if tc.extra != "" && most < 40 {
				t.Errorf("share off: a sync exchanged at most %d keys, want every light key that admitted", most)
			}
			if tc.extra == "" {
				checkWithin(t, f, lightN)
			}
		})
	}
}

// One host sees the source far above its share; the two others see it
// below theirs (0.8 of the share's rate each), which alone would never
// make them report. They hear of it on the fleet's stream and exchange
// what they admit: the fleet holds the limit. Then the flood stops and the
// key leaves the exchange once share_hold has passed.
func TestFleetShareAnnounced(t *testing.T) {
	testutil.HostOnly(t, "the simulation's clock runs slower than the real time in which Redis expires keys")
	r, ns := startRedis(t)
	f, _ := newHosts(t, testutil.DialIn(ns), 3, sharePolicy(r.Addr(), "  share_hold: 2s\n"))
	hp := pktgen.UDP4(src, dst, 4000, 53, 16)
	heavy := []*stream{{host: 0, pkt: hp, every: time.Millisecond},
		// 100/s / 3 hosts x 0.8: one packet every 37.5 ms.
		{host: 1, pkt: hp, every: 37500 * time.Microsecond}, {host: 2, pkt: hp, every: 37500 * time.Microsecond, offset: 11 * time.Millisecond}}
	const dur = 5 * time.Second
	drive(t, f, heavy, dur, 100*time.Millisecond)
	_, got := passed(heavy)
	t.Logf("host 0 admitted %d, hosts 1 and 2 %d and %d (sent %d, %d)", heavy[0].passed, heavy[1].passed, heavy[2].passed,
		heavy[1].sent, heavy[2].sent)
	within(t, "one host above its share", got, 100+100*dur.Seconds(), 0.05)
	if heavy[1].passed == heavy[1].sent && heavy[2].passed == heavy[2].sent && heavy[0].passed > 450 {
		t.Errorf("hosts 1 and 2 admitted everything: they did not count against the fleet")
	}
	// The flood stops; the quiet key leaves the exchange after the hold.
	res := drive(t, f, nil, 3*time.Second, 100*time.Millisecond)
	for _, r := range res[len(res)-3:] {
		if r.Exchanged != 0 {
			t.Errorf("%d keys still exchanged 3 s after the flood (share_hold 2s)", r.Exchanged)
		}
	}
	again := []*stream{{host: 1, pkt: hp, every: 37500 * time.Microsecond}}
	res = drive(t, f, again, time.Second, 100*time.Millisecond)
	for _, r := range res {
		if r.Exchanged != 0 {
			t.Errorf("the key, below its share again, was exchanged (%d keys)", r.Exchanged)
			break
		}
	}
}

// checkWithin: each host's state tables hold want keys within their share
// (the light ones; the heavy one is in the exchange).
func checkWithin(t *testing.T, f *fleetsim.Fleet, want int) {
	t.Helper()
	fls, err := f.Hosts[0].L.FleetLevels()
	if err != nil || len(fls) != 1 {
		t.Fatalf("fleet levels: %v %v", fls, err)
	}
	for i, h := range f.Hosts {
		n, err := h.L.FleetWithinShare(map[uint32]bool{fls[0].StateID: true})
		if err != nil {
			t.Fatal(err)
		}
		if n[fls[0].StateID] != want {
			t.Errorf("host %d: %d keys within their share, want %d", i, n[fls[0].StateID], want)
		}
		if err := h.E.CountWithin(); err != nil {
			t.Error(err)
		}
	}
}

// An engine that stops (an attach process exits, a reload restarts the
// sync) leaves the shares in the datapath, and the next one starts from
// them: the keys within their share do not all report at once.
func TestFleetShareRestart(t *testing.T) {
	testutil.HostOnly(t, "the simulation's clock runs slower than the real time in which Redis expires keys")
	r, ns := startRedis(t)
	f, p := newHosts(t, testutil.DialIn(ns), 1, sharePolicy(r.Addr(), ""))
	light := lightStreams(100, 1, 200*time.Millisecond)
	drive(t, f, light, time.Second, 100*time.Millisecond)
	h := f.Hosts[0]
	if err := h.E.Close(); err != nil {
		t.Fatal(err)
	}
	e, err := fleet.New(fleet.Options{Fleet: p.Fleet, Interface: "h0", Now: f.Now, Dialer: testutil.DialIn(ns)}, h.L)
	if err != nil {
		t.Fatal(err)
	}
	h.E = e
	drive(t, f, light, 500*time.Millisecond, time.Hour) // no sync
	n, err := h.L.DrainFleetKeys(1<<20, func(maps.FleetKey) {})
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("after a restart, %d keys within their share reported", n)
	}
}
