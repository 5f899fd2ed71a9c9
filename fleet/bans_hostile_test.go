package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xdplimit/xdplimit/fleet"
	"github.com/xdplimit/xdplimit/internal/command"
	"github.com/xdplimit/xdplimit/internal/harness/fleetsim"
	"github.com/xdplimit/xdplimit/internal/termsafe"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
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

// Anyone who can write the fleet's Redis can write its ban hash. Hostile
// entries written there with redis-cli: bans of the whole Internet (IPv4,
// IPv6, IPv4-mapped), a reason that would retitle and clear a terminal,
// fields that are not prefixes, values that are not bans, expiries in the
// past and far ahead, an entry of 10 kB, then 100k valid bans. Every host
// goes on syncing and enforcing its limits, applies only what the bans:
// section allows (at most max_per_sync a sync, max_imported in all), and
// says so once per kind in its log and in its metrics.
func TestFleetBansHostile(t *testing.T) {
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
	key := "xdpl:" + namespace + ":bans"
	host, port, _ := strings.Cut(r.Addr(), ":")
	cli := func(args ...string) string {
		t.Helper()
		out, err := command.Run(30*time.Second, "nsenter", append([]string{"--net=" + ns.Path(),
			"redis-cli", "-h", host, "-p", port}, args...)...)
		if err != nil || strings.Contains(string(out), "ERR") {
			t.Fatalf("redis-cli %v: %v: %s", args[0], err, out)
		}
		return strings.TrimSpace(string(out))
	}
	expiry := func(d time.Duration) string {
		return strconv.FormatInt((fleetsim.WallBase+int64(f.Now()))/1e6+d.Milliseconds(), 10)
	}
	ctx := context.Background()
	dst := netip.MustParseAddr("192.0.2.1")
	tick := pktgen.UDP4(netip.MustParseAddr("192.0.2.99"), dst, 4000, 9, 10)
	sync := func() {
		t.Helper()
		f.Advance(100 * time.Millisecond)
		for i, h := range f.Hosts {
			// The ban table reads the injected clock a packet writes.
			if _, err := h.Send(tick); err != nil {
				t.Fatal(err)
			}
			logs.mu.Lock()
			logs.cur = i
			logs.mu.Unlock()
			if res := h.E.Sync(ctx); res.Err != nil {
				t.Fatalf("host %d: sync: %v", i, res.Err)
			}
		}
	}
	const escapes = "\x1b]0;pwned\x07\x1b[2J"
	for _, e := range [][2]string{
		{"0.0.0.0/0", expiry(time.Hour) + "|evil|the world"},
		{"::/0", expiry(time.Hour) + "|evil|the world"},
		{"::ffff:0.0.0.0/96", expiry(time.Hour) + "|evil|the world, mapped"},
		{"198.51.100.66/32", expiry(time.Hour) + "|evil host|" + escapes},
		{"not-a-prefix", expiry(time.Hour) + "|evil|"},
		{"\x1b[2J", expiry(time.Hour) + "|evil|"},
		{"198.51.100.67/32", "garbage"},
		{"203.0.113.1/32", "1|old|"},
		{"203.0.113.2/32", expiry(-time.Second) + "|old|"},
		{"203.0.113.3/32", expiry(400*24*time.Hour) + "|future|"},
		{"203.0.113.4/32", expiry(time.Hour) + "|big|" + strings.Repeat("x", 10000)},
	} {
		cli("HSET", key, e[0], e[1])
	}
	for range 3 {
		sync()
	}
	for i, h := range f.Hosts {
		bans, err := h.L.Bans()
		if err != nil {
			t.Fatal(err)
		}
		if len(bans) != 1 || bans[0].Prefix != netip.MustParsePrefix("198.51.100.66/32") ||
			bans[0].Reason != `fleet: evil host: \x1b]0;pwned\x07\x1b[2J` {
			t.Fatalf("host %d bans %+v, want only 198.51.100.66/32 with its reason escaped", i, bans)
		}
	}
	// Refused but well-formed entries stay (a host with other limits may
	// take them); the rest no host wants: removed.
	rc := r.Client()
	defer rc.Close()
	fields, err := rc.HKeys(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"0.0.0.0/0", "::/0", "::ffff:0.0.0.0/96", "198.51.100.66/32", "203.0.113.3/32"}; !sameSet(fields, want) {
		t.Fatalf("hash fields %q, want %q", fields, want)
	}
	// Host 0 synced first and removed what no host wants: it counted and
	// logged those; both counted the rest, once however many syncs.
	for i, want := range []map[string]float64{
		{"too_wide": 3, "malformed": 4, "expired": 2, "too_long": 1, "datapath": 0, "escaped": 1},
		{"too_wide": 3, "malformed": 0, "expired": 0, "too_long": 1, "datapath": 0, "escaped": 1},
	} {
		m := f.Hosts[i].E.Metrics()
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
		for s, n := range want {
			if got := logs.count(i, s); got != n {
				t.Errorf("host %d logged %d lines with %q, want %d:\n%s", i, got, s, n, strings.Join(logs.lines[i], "\n"))
			}
		}
	}
	for i := range f.Hosts {
		for _, line := range logs.lines[i] {
			if !termsafe.Clean(line) {
				t.Errorf("host %d logged control characters: %q", i, line)
			}
		}
	}

	// 100k valid bans: each sync applies at most 1000, and the hosts hold
	// 3000 from the fleet at most (the one above included), reading the
	// hash a part per sync.
	if n := cli("EVAL", `for i = 0, tonumber(ARGV[1]) - 1 do
  redis.call('HSET', KEYS[1], string.format('10.%d.%d.%d/32', math.floor(i / 65536), math.floor(i / 256) % 256, i % 256), ARGV[2])
end
return redis.call('HLEN', KEYS[1])`, "1", key, "100000", expiry(time.Hour)+"|mass|"); n != "100005" {
		t.Fatalf("hash size %s after the mass insertion", n)
	}
	for round := 1; round <= 5; round++ {
		sync()
		for i, h := range f.Hosts {
			bans, err := h.L.Bans()
			if err != nil {
				t.Fatal(err)
			}
			if want := min(1+1000*round, 3000); len(bans) != want {
				t.Fatalf("round %d: host %d holds %d bans, want %d", round, i, len(bans), want)
			}
		}
	}
	for i, h := range f.Hosts {
		m := h.E.Metrics()
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
		for s, n := range map[string]int{"applied 1000 this sync": 1, "holding 3000": 1, "a part per sync": 1,
			"(too_wide:": 1, "(too_long:": 1} {
			if got := logs.count(i, s); got != n {
				t.Errorf("host %d logged %d lines with %q, want %d:\n%s", i, got, s, n, strings.Join(logs.lines[i], "\n"))
			}
		}
	}

	// Every host still enforces: its rule's limit, the bans it took, and
	// not the bans it refused.
	for i, h := range f.Hosts {
		bans, _ := h.L.Bans()
		var mass netip.Addr
		for _, b := range bans {
			if b.Prefix.Addr().As4()[0] == 10 {
				mass = b.Prefix.Addr()
				break
			}
		}
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
			if got, err := h.Send(c.pkt); err != nil || got != c.want {
				t.Errorf("host %d: %s: admitted %v (%v), want %v", i, c.what, got, err, c.want)
			}
		}
		dns := pktgen.UDP4(netip.MustParseAddr("192.0.2.50"), dst, 4000, 53, 10)
		var admitted []bool
		for range 7 {
			ok, err := h.Send(dns)
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

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	in := map[string]bool{}
	for _, s := range a {
		in[s] = true
	}
	for _, s := range b {
		if !in[s] {
			return false
		}
	}
	return true
}

// gathered is the value of the series of family name whose label has
// value ("" for a family of one series).
func gathered(t *testing.T, c prometheus.Collector, name, label, value string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := label == ""
			for _, lp := range m.GetLabel() {
				match = match || lp.GetName() == label && lp.GetValue() == value
			}
			if !match {
				continue
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue()
			case m.Gauge != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no series %s{%s=%q}", name, label, value)
	return 0
}

// refusingTable is a ban table whose datapath refuses the bans of some
// prefixes, as a full trie would.
type refusingTable struct {
	*maps.Limiter
	refuse map[netip.Prefix]bool
}

func (r refusingTable) BanAll(reqs []maps.BanRequest) ([]maps.BanResult, error) {
	var pass []maps.BanRequest
	for _, q := range reqs {
		if !r.refuse[q.Prefix] {
			pass = append(pass, q)
		}
	}
	got, err := r.Limiter.BanAll(pass)
	res := make([]maps.BanResult, len(reqs))
	for i, q := range reqs {
		if r.refuse[q.Prefix] {
			res[i].Err = errors.New("no space left on device")
			continue
		}
		res[i], got = got[0], got[1:]
	}
	return res, err
}

// A ban the datapath refuses is skipped and counted once; the others of
// the sync apply, the sync succeeds, and the refused one is tried again at
// the next syncs.
func TestFleetBansDatapathRefuses(t *testing.T) {
	r, ns := startRedis(t)
	log := &logLines{}
	img, p := xdpltest.CompilePolicy(t, fmt.Sprintf("fleet: {redis: 'redis://%s/0', namespace: refuse%d}\nrules: []\n",
		r.Addr(), time.Now().UnixNano()))
	l := xdpltest.LoadImage(t, maps.Options{Clock: maps.ClockKtime, MaxSources: 1 << 10}, img)
	bad := netip.MustParsePrefix("198.51.100.0/24")
	e, err := fleet.New(fleet.Options{Fleet: p.Fleet, Interface: "t", Logf: log.logf, Dialer: testutil.DialIn(ns)},
		refusingTable{l, map[netip.Prefix]bool{bad: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	rc := r.Client()
	defer rc.Close()
	end := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
	ctx := context.Background()
	if err := rc.HSet(ctx, "xdpl:"+p.Fleet.Namespace+":bans", "198.51.100.0/24", end+"|h1|", "203.0.113.0/24", end+"|h1|").Err(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if res := e.Sync(ctx); res.Err != nil {
			t.Fatalf("sync: %v", res.Err)
		}
	}
	bans, err := l.Bans()
	if err != nil || len(bans) != 1 || bans[0].Prefix != netip.MustParsePrefix("203.0.113.0/24") {
		t.Fatalf("bans %+v (%v), want 203.0.113.0/24 alone", bans, err)
	}
	if n := gathered(t, e.Metrics(), "xdplimit_bans_refused_total", "reason", "datapath"); n != 1 {
		t.Errorf("refused by the datapath: %v, want 1", n)
	}
	var lines []string
	for _, s := range log.all() {
		if strings.Contains(s, "(datapath:") {
			lines = append(lines, s)
		}
	}
	if want := "fleet: refused 198.51.100.0/24 (datapath: no space left on device)"; len(lines) != 1 || lines[0] != want {
		t.Errorf("logged %q, want %q once", lines, want)
	}
	// Still in the hash: another host's table may take it.
	if n, err := rc.HLen(ctx, "xdpl:"+p.Fleet.Namespace+":bans").Result(); err != nil || n != 2 {
		t.Errorf("hash holds %d entries (%v), want 2", n, err)
	}
}
