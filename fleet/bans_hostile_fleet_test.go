// SPDX-License-Identifier: Apache-2.0

package fleet_test

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/command"
	"github.com/xdplimit/xdplimit/internal/harness/fleetsim"
	"github.com/xdplimit/xdplimit/internal/termsafe"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

// hostLogs collects the engines' lines by the host whose sync wrote them
// (the hosts sync one at a time).
type hostLogs struct {
	mu    sync.Mutex
	cur   int
	lines map[int][]string
}

func (l *hostLogs) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines[l.cur] = append(l.lines[l.cur], fmt.Sprintf(format, args...))
}

// count is the lines host h logged that hold s.
func (l *hostLogs) count(h int, s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines[h] {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

// hostileFleet is two hosts sharing a Redis whose ban hash the test
// writes as an attacker would, with redis-cli.
type hostileFleet struct {
	t          *testing.T
	r          *testutil.RedisServer
	ns         *testutil.Netns
	f          *fleetsim.Fleet
	logs       *hostLogs
	key        string // the ban hash
	host, port string // redis-cli's -h and -p
	ctx        context.Context
}

func newHostileFleet(t *testing.T) *hostileFleet {
	r, ns := startRedis(t)
	namespace := fmt.Sprintf("hostile%d", time.Now().UnixNano())
	logs := &hostLogs{lines: map[int][]string{}}
	f, err := fleetsim.New(fleetsim.Config{Hosts: 2, Dial: testutil.DialIn(ns), Logf: logs.logf, Policy: fmt.Sprintf(`
fleet:
  redis: redis://%s/0
  namespace: %s
  sync: 100ms
bans: {max_imported: 3000, max_per_sync: 1000}
rules:
  - name: dns
    match: {protocol: udp, dst_ports: [53]}
    limit: {algorithm: fixed_window, packets: 5, window: 10s}
`, r.Addr(), namespace)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	host, port, _ := strings.Cut(r.Addr(), ":")
	return &hostileFleet{t: t, r: r, ns: ns, f: f, logs: logs, key: "xdpl:" + namespace + ":bans",
		host: host, port: port, ctx: context.Background()}
}

// cli runs redis-cli in the Redis server's namespace.
func (h *hostileFleet) cli(args ...string) string {
	h.t.Helper()
	out, err := command.Run(30*time.Second, "nsenter", append([]string{"--net=" + h.ns.Path(),
		"redis-cli", "-h", h.host, "-p", h.port}, args...)...)
	if err != nil || strings.Contains(string(out), "ERR") {
		h.t.Fatalf("redis-cli %v: %v: %s", args[0], err, out)
	}
	return strings.TrimSpace(string(out))
}

// expiry is a hash value's expiry d from the fleet's now.
func (h *hostileFleet) expiry(d time.Duration) string {
	return strconv.FormatInt((fleetsim.WallBase+int64(h.f.Now()))/1e6+d.Milliseconds(), 10)
}

// sync syncs each host in turn, its log lines noted as its own.
func (h *hostileFleet) sync() {
	h.t.Helper()
	h.f.Advance(100 * time.Millisecond)
	for i, host := range h.f.Hosts {
		// The ban table reads the injected clock a packet writes.
		if _, err := host.Send(clockTick); err != nil {
			h.t.Fatal(err)
		}
		h.logs.mu.Lock()
		h.logs.cur = i
		h.logs.mu.Unlock()
		h.syncHost(i, host)
	}
}

// syncHost syncs one host until a sync succeeds. A sync that fails changes
// nothing and the host enforces on, by design; under emulation on a
// loaded machine the Redis scripts over the hostile hash can outlast the
// client's I/O timeout, which is the machine's pace, not the product's
// (testutil.MachineWait bounds the retries). What the test judges, what a
// successful sync applies, is unchanged.
func (h *hostileFleet) syncHost(i int, host *fleetsim.Host) {
	h.t.Helper()
	deadline := time.Now().Add(testutil.MachineWait)
	for {
		res := host.E.Sync(h.ctx)
		if res.Err == nil {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("host %d: sync: %v", i, res.Err)
		}
		h.t.Logf("host %d: sync failed, tried again: %v", i, res.Err)
	}
}

const hostileEscapes = "\x1b]0;pwned\x07\x1b[2J"

// writeHostile writes an entry of each hostile kind.
func (h *hostileFleet) writeHostile() {
	for _, e := range [][2]string{
		{"0.0.0.0/0", h.expiry(time.Hour) + "|evil|the world"},
		{"::/0", h.expiry(time.Hour) + "|evil|the world"},
		{"::ffff:0.0.0.0/96", h.expiry(time.Hour) + "|evil|the world, mapped"},
		{"198.51.100.66/32", h.expiry(time.Hour) + "|evil host|" + hostileEscapes},
		{"not-a-prefix", h.expiry(time.Hour) + "|evil|"},
		{"\x1b[2J", h.expiry(time.Hour) + "|evil|"},
		{"198.51.100.67/32", "garbage"},
		{"203.0.113.1/32", "1|old|"},
		{"203.0.113.2/32", h.expiry(-time.Second) + "|old|"},
		{"203.0.113.3/32", h.expiry(400*24*time.Hour) + "|future|"},
		{"203.0.113.4/32", h.expiry(time.Hour) + "|big|" + strings.Repeat("x", 10000)},
	} {
		h.cli("HSET", h.key, e[0], e[1])
	}
}

// checkOnlyEscapedBan: of the hostile entries, each host took the one
// valid ban alone, its reason escaped.
func (h *hostileFleet) checkOnlyEscapedBan() {
	t := h.t
	for i, host := range h.f.Hosts {
		bans, err := host.L.Bans()
		if err != nil {
			t.Fatal(err)
		}
		if len(bans) != 1 || bans[0].Prefix != netip.MustParsePrefix("198.51.100.66/32") ||
			bans[0].Reason != `fleet: evil host: \x1b]0;pwned\x07\x1b[2J` {
			t.Fatalf("host %d bans %+v, want only 198.51.100.66/32 with its reason escaped", i, bans)
		}
	}
}

// checkHashKeepsRefused: refused but well-formed entries stay (a host with
// other limits may take them); the rest no host wants: removed.
func (h *hostileFleet) checkHashKeepsRefused() {
	rc := h.r.Client()
	defer rc.Close()
	fields, err := rc.HKeys(h.ctx, h.key).Result()
	if err != nil {
		h.t.Fatal(err)
	}
	if want := []string{"0.0.0.0/0", "::/0", "::ffff:0.0.0.0/96", "198.51.100.66/32", "203.0.113.3/32"}; !sameSet(fields, want) {
		h.t.Fatalf("hash fields %q, want %q", fields, want)
	}
}

// checkRefusalsReported: host 0 synced first and removed what no host
// wants: it counted and logged those; both counted the rest, once however
// many syncs. No line logged holds a control character.
func (h *hostileFleet) checkRefusalsReported() {
	t := h.t
	for i, want := range []map[string]float64{
		{"too_wide": 3, "malformed": 4, "expired": 2, "too_long": 1, "datapath": 0, "escaped": 1},
		{"too_wide": 3, "malformed": 0, "expired": 0, "too_long": 1, "datapath": 0, "escaped": 1},
	} {
		m := h.f.Hosts[i].E.Metrics()
		for reason, n := range want {
			family, label := "xdplimit_bans_refused_total", "reason"
			if reason == "escaped" {
				family, label = "xdplimit_bans_escaped_total", ""
			}
			got := gathered(t, m, family, label, reason)
			if got != n {
				t.Errorf("host %d: %s %v, want %v", i, reason, got, n)
			}
		}
	}
	for i, want := range []map[string]int{
		{"(too_wide:": 1, "(malformed:": 1, "(too_long:": 1, "(expired": 0, "stored escaped": 1},
		{"(too_wide:": 1, "(malformed:": 0, "(too_long:": 1, "(expired": 0, "stored escaped": 1},
	} {
		h.checkLogged(i, want)
	}
	for i := range h.f.Hosts {
		for _, line := range h.logs.lines[i] {
			if !termsafe.Clean(line) {
				t.Errorf("host %d logged control characters: %q", i, line)
			}
		}
	}
}

// checkLogged: host i logged, for each string, that many lines holding it.
func (h *hostileFleet) checkLogged(i int, want map[string]int) {
	for s, n := range want {
		if got := h.logs.count(i, s); got != n {
			h.t.Errorf("host %d logged %d lines with %q, want %d:\n%s", i, got, s, n, strings.Join(h.logs.lines[i], "\n"))
		}
	}
}

// writeMass writes 100k valid bans of 10.0.0.0/8's /32s in one script.
func (h *hostileFleet) writeMass() {
	if n := h.cli("EVAL", `for i = 0, tonumber(ARGV[1]) - 1 do
  redis.call('HSET', KEYS[1], string.format('10.%d.%d.%d/32', math.floor(i / 65536), math.floor(i / 256) % 256, i % 256), ARGV[2])
end
return redis.call('HLEN', KEYS[1])`, "1", h.key, "100000", h.expiry(time.Hour)+"|mass|"); n != "100005" {
		h.t.Fatalf("hash size %s after the mass insertion", n)
	}
}

// checkHeld: after round syncs of the mass, each host holds 1000 more a
// sync, up to max_imported.
func (h *hostileFleet) checkHeld(round int) {
	for i, host := range h.f.Hosts {
		bans, err := host.L.Bans()
		if err != nil {
			h.t.Fatal(err)
		}
		if want := min(1+1000*round, 3000); len(bans) != want {
			h.t.Fatalf("round %d: host %d holds %d bans, want %d", round, i, len(bans), want)
		}
	}
}

// checkMassReported: each host counted and logged each limit the mass
// reached, once.
func (h *hostileFleet) checkMassReported() {
	t := h.t
	for i, host := range h.f.Hosts {
		m := host.E.Metrics()
		for limit, n := range map[string]float64{"per_sync": 2, "total": 3, "read": 5} {
			if got := gathered(t, m, "xdplimit_bans_import_limited_total", "limit", limit); got != n {
				t.Errorf("host %d: limited %s %v, want %v", i, limit, got, n)
			}
		}
		if got := gathered(t, m, "xdplimit_bans_imported", "", ""); got != 3000 {
			t.Errorf("host %d: imported %v, want 3000", i, got)
		}
		if got := gathered(t, m, "xdplimit_fleet_ban_hash_entries", "", ""); got != 100005 {
			t.Errorf("host %d: hash entries %v, want 100005", i, got)
		}
		h.checkLogged(i, map[string]int{"applied 1000 this sync": 1, "holding 3000": 1, "a part per sync": 1,
			"(too_wide:": 1, "(too_long:": 1})
	}
}

// checkStillEnforces: every host still enforces its rule's limit and the
// bans it took, and not the bans it refused.
func (h *hostileFleet) checkStillEnforces() {
	t := h.t
	for i, host := range h.f.Hosts {
		mass := massBan(host.L)
		for _, c := range []struct {
			what string
			pkt  []byte
			want bool
		}{
			{"8.8.8.8 (0.0.0.0/0 refused)", pktgen.UDP4(netip.MustParseAddr("8.8.8.8"), dst, 4000, 9, 10), true},
			{"2001:db8::1 (::/0 refused)", pktgen.UDP6(netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2"), 4000, 9, 10), true},
			{"203.0.113.3 (too long, refused)", pktgen.UDP4(netip.MustParseAddr("203.0.113.3"), dst, 4000, 9, 10), true},
			{"198.51.100.66 (banned)", pktgen.UDP4(netip.MustParseAddr("198.51.100.66"), dst, 4000, 9, 10), false},
			{mass.String() + " (banned)", pktgen.UDP4(mass, dst, 4000, 9, 10), false},
		} {
			if got, err := host.Send(c.pkt); err != nil || got != c.want {
				t.Errorf("host %d: %s: admitted %v (%v), want %v", i, c.what, got, err, c.want)
			}
		}
		dns := pktgen.UDP4(netip.MustParseAddr("192.0.2.50"), dst, 4000, 53, 10)
		var admitted []bool
		for range 7 {
			ok, err := host.Send(dns)
			if err != nil {
				t.Fatal(err)
			}
			admitted = append(admitted, ok)
		}
		if fmt.Sprint(admitted) != "[true true true true true false false]" {
			t.Errorf("host %d: dns limit 5 per 10s admitted %v", i, admitted)
		}
	}
}

// massBan is one of the mass's bans the table holds.
func massBan(l *maps.Limiter) netip.Addr {
	bans, _ := l.Bans()
	for _, b := range bans {
		if b.Prefix.Addr().As4()[0] == 10 {
			return b.Prefix.Addr()
		}
	}
	return netip.Addr{}
}
