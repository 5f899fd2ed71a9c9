// SPDX-License-Identifier: Apache-2.0

package agent_test

// GeoIP end to end: databases written with MaxMind's writer, a policy
// naming countries and an AS, the agent attached natively on the veth, UDP
// datagrams from the sending namespace counted at the receiver's stack.

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"

	"github.com/xdplimit/xdplimit/agent"
	"github.com/xdplimit/xdplimit/gen"
	"github.com/xdplimit/xdplimit/internal/testkit/mmdbtest"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
)

// sendFrom sends n UDP datagrams from src (an address of the sending
// namespace) to dst and returns how many reached the receiver's UDP layer
// (no socket listens there: Udp.NoPorts counts each).
func sendFrom(t *testing.T, v *testutil.Veth, src, dst netip.Addr, n int) uint64 {
	t.Helper()
	before := v.PeerNS.Settle(t)
	rx := v.PeerNS.RxSeen(t, v.PeerName)
	err := v.NS.Do(func() error {
		// Unconnected: the port unreachable answers do not fail the
		// next writes.
		c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0)))
		if err != nil {
			return err
		}
		defer c.Close()
		to := net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 9))
		for range n {
			if _, err := c.WriteToUDP([]byte("geo"), to); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	v.PeerNS.WaitRx(t, v.PeerName, rx, uint64(n))
	d := v.PeerNS.Settle(t).Delta(before)
	if dst.Is4() {
		return d.UDPNoPorts
	}
	return d.UDP6NoPorts
}

// addAddr gives the sending end of v another IPv4 address of its subnet.
func addAddr(t *testing.T, v *testutil.Veth, a netip.Addr) {
	t.Helper()
	err := v.NS.Do(func() error {
		l, err := netlink.LinkByName(v.Name)
		if err != nil {
			return err
		}
		return netlink.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(24, 32)}})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// geoCountryDB writes the country database of the live test: the sending
// addresses, each its own country.
func geoCountryDB(t *testing.T, path string, of map[string]string) {
	t.Helper()
	var nets []mmdbtest.Network
	for p, c := range of {
		nets = append(nets, mmdbtest.Network{Prefix: p, Record: mmdbtest.Country(c, c)})
	}
	mmdbtest.Write(t, path, "GeoLite2-Country", nets...)
}

// TestAgentGeoIP: live traffic judged by src_countries, src_asns and a
// country deny list, IPv4 and IPv6; a database replaced by rename (as
// geoipupdate does) reloads the policy under --watch, and its sets follow.
func TestAgentGeoIP(t *testing.T) {
	testutil.RequireRoot(t)
	v := newVeth(t)
	de, cn, as := v.Addr, netip.MustParseAddr("198.18.0.77"), netip.MustParseAddr("198.18.0.99")
	addAddr(t, v, cn)
	addAddr(t, v, as)
	dir := t.TempDir()
	countryDB, asnDB := filepath.Join(dir, "country.mmdb"), filepath.Join(dir, "asn.mmdb")
	geoCountryDB(t, countryDB, map[string]string{"198.18.0.1/32": "DE", "2001:2::1/128": "DE", "198.18.0.77/32": "CN",
		"198.18.0.99/32": "FR"})
	mmdbtest.Write(t, asnDB, "GeoLite2-ASN", mmdbtest.Network{Prefix: "198.18.0.96/30", Record: mmdbtest.ASN(64496, "Example")})
	path := policyFile(t, fmt.Sprintf(`geoip: {country_db: %s, asn_db: %s}
deny: {countries: [CN]}
rules:
  - name: de
    match: {protocol: udp, src_countries: [DE]}
    limit: {algorithm: fixed_window, packets: 5, window: 1h}
  - name: as
    match: {protocol: udp, src_asns: [64496]}
    limit: {algorithm: fixed_window, packets: 2, window: 1h}
`, countryDB, asnDB))
	a := startAgent(t, v, agent.Config{Policy: path, Watch: true})

	for _, c := range []struct {
		name     string
		src, dst netip.Addr
		want     uint64
	}{
		{"DE", de, v.PeerAddr, 5},
		{"DE, IPv6", v.Addr6, v.PeerAddr6, 5},
		{"CN, denied", cn, v.PeerAddr, 0},
		{"AS64496", as, v.PeerAddr, 2},
	} {
		if got := sendFrom(t, v, c.src, c.dst, 20); got != c.want {
			t.Errorf("%s (%s): %d of 20 reached the stack, want %d", c.name, c.src, got, c.want)
		}
	}

	// geoipupdate renames a new database over the old one: 198.18.0.1 is
	// now in CN. The watcher reloads the policy, which reads it anew.
	reloads := strings.Count(a.logs.String(), "trigger=\"file change\"")
	geoCountryDB(t, countryDB, map[string]string{"198.18.0.1/32": "CN", "2001:2::1/128": "DE", "198.18.0.77/32": "CN",
		"198.18.0.99/32": "FR"})
	if !eventually(testutil.MachineWait, func() bool { return strings.Count(a.logs.String(), "trigger=\"file change\"") > reloads }) {
		t.Fatalf("no reload within 10 s of the database's replacement:\n%s", a.logs)
	}
	if !strings.Contains(a.logs.String(), "msg=reloaded") {
		t.Fatalf("the reload failed:\n%s", a.logs)
	}
	if got := sendFrom(t, v, de, v.PeerAddr, 20); got != 0 {
		t.Errorf("198.18.0.1, now in CN: %d of 20 reached the stack, want none", got)
	}
	if got := sendFrom(t, v, v.Addr6, v.PeerAddr6, 20); got != 0 {
		t.Errorf("2001:2::1, still DE and over its limit: %d of 20 reached the stack, want none", got)
	}
}

// memlock is the kernel's own count of a map's memory (fdinfo).
func memlock(t *testing.T, m *ebpf.Map) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", m.FD()))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "memlock:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

// TestAgentGeoIPLarge: a country database of 500k networks (400k IPv4
// /24s and 100k IPv6 /40s over 234 countries, scattered so that little
// merges: mmdbtest.WriteLarge) compiles, database read included, into one
// trie or the other; the compile's time (the target is 5 s; a time is
// reported, never asserted), policy check's memory estimate, the kernel's
// count once applied and the time the attach takes are logged. The VM
// suite hands the test the database written on the host
// (XDPLIMIT_GEOIP_LARGE_DB): writing it is the writer's work, not the
// kernel's, and costs minutes of an emulated CPU.
func TestAgentGeoIPLarge(t *testing.T) {
	testutil.RequireRoot(t)
	if testing.Short() {
		t.Skip("writes a 500k-network database (-short)")
	}
	const n4, n6 = mmdbtest.LargeV4, mmdbtest.LargeV6
	codes := mmdbtest.LargeCodes()
	db := os.Getenv("XDPLIMIT_GEOIP_LARGE_DB")
	if db == "" {
		start := time.Now()
		db = filepath.Join(t.TempDir(), "country.mmdb")
		if err := mmdbtest.WriteLarge(db); err != nil {
			t.Fatal(err)
		}
		runtime.GC()
		t.Logf("wrote %d networks in %v", n4+n6, time.Since(start).Round(time.Millisecond))
	} else if _, err := os.Stat(db); err != nil {
		t.Fatalf("XDPLIMIT_GEOIP_LARGE_DB: %v", err)
	}

	// Half the countries denied, the other half in a rule's sources: every
	// network of the database in one trie or the other.
	half := len(codes) / 2
	path := policyFile(t, fmt.Sprintf(`geoip: {country_db: %s}
deny: {countries: [%s]}
rules:
  - name: rest
    match: {src_countries: [%s]}
    limit: {algorithm: token_bucket, rate: 100/s, burst: 100}
`, db, strings.Join(codes[:half], ", "), strings.Join(codes[half:], ", ")))
	start := time.Now()
	_, p, err := agent.CompilePolicy(path, nil)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	p.Describe(&b)
	var uses []string
	for _, u := range p.GeoIP.Uses {
		uses = append(uses, fmt.Sprintf("%s %d+%d prefixes ~%d MiB", u.Where, u.V4, u.V6, u.Bytes>>20))
	}
	t.Logf("compiled in %v: %s", took.Round(time.Millisecond), strings.Join(uses, "; "))
	if n := len(p.Deny) + len(p.Rules[0].Match.SrcGeo); n < (n4+n6)*9/10 {
		t.Errorf("%d prefixes in the deny list and the rule, want about %d", n, n4+n6)
	}

	v := newVeth(t)
	start = time.Now()
	startAgent(t, v, agent.Config{Policy: path})
	t.Logf("attached in %v", time.Since(start).Round(time.Millisecond))
	l := pinned(t, v.PeerName).Limiter
	for _, name := range []string{gen.XdplimitMapXdplSrc4, gen.XdplimitMapXdplSrc6, gen.XdplimitMapXdplAcl4, gen.XdplimitMapXdplAcl6} {
		t.Logf("%s: %s bytes of memlock (the kernel's count)", name, memlock(t, l.Map(name)))
	}
}
