// SPDX-License-Identifier: Apache-2.0

package fleetlab

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/pktgen"
)

// The lab's private addresses exist only inside its namespaces, so labs of
// concurrent tests never collide.
var (
	// RedisIP is the Redis bridge's address, the same for every host.
	RedisIP = netip.MustParseAddr("10.79.0.1")
	// RedisPort is where Lab.StartRedis listens.
	RedisPort uint16 = 6379
)

// Host is one host of the lab.
type Host struct {
	Index int
	// NS is the host's namespace: NS.Name() for `ip netns`, NS.Path()
	// (/var/run/netns/...) for `nsenter --net=` and pktgen.
	NS *testutil.Netns
	// Eth0 is the traffic interface, where the XDP program is attached:
	// addressed, rp_filter off, so spoofed sources reach the stack.
	// Its name is unique per lab and host, not "eth0": xdplimit pins its
	// state under /sys/fs/bpf/xdplimit/<ifname> in the one bpffs every
	// namespace shares, so equal names would collide.
	Eth0     string
	Eth0Addr netip.Addr
	Eth0MAC  net.HardwareAddr
	// Eth1 is the link to Redis (unique name likewise).
	Eth1     string
	Eth1Addr netip.Addr

	// GenLink is the generator's veth to Eth0 (NS/Name the generator's
	// end, PeerNS/PeerName this host's), for tests that drive pktgen
	// themselves, with random sources for instance.
	GenLink *testutil.Veth

	port string // the bridge port of Eth1's peer, in the Redis ns
}

// Lab is a fleet of hosts, a generator and a Redis namespace, all created
// by one test and deleted in its cleanup, which runs even when it fails.
// Each host is a network namespace with a traffic interface fed by the
// live-frames generator and a link to the Redis namespace, which every host
// reaches at the same address:
//
//	generator ns                 host i ns                 Redis ns
//	g<i> 10.80.i.1 ── veth ── Eth0 10.80.i.2
//	                             Eth1 10.79.0.(10+i) ── veth ── p<i> ─ br0 10.79.0.1
//
// Eth0 and Eth1 are named xf<lab id>e<i> and xf<lab id>r<i> (see Host).
type Lab struct {
	// ID is random per lab and part of every interface name.
	ID        string
	Generator *testutil.Netns
	RedisNS   *testutil.Netns

	hosts []*Host
	genMu sync.Mutex
	gen   *pktgen.Generator
}

// NewLab builds a lab of n hosts (1 to 200). It requires root and XDP
// live-frames test runs, which the flood uses.
func NewLab(tb testing.TB, n int) *Lab {
	tb.Helper()
	testutil.RequireRoot(tb)
	testutil.RequireLiveFrames(tb)
	if n < 1 || n > 200 {
		tb.Fatalf("fleetlab: %d hosts, want 1 to 200", n)
	}
	id := make([]byte, 3)
	_, _ = rand.Read(id)
	l := &Lab{
		ID:        hex.EncodeToString(id),
		Generator: testutil.NewNetns(tb),
		RedisNS:   testutil.NewNetns(tb),
	}
	if err := l.RedisNS.Do(addBridge); err != nil {
		tb.Fatalf("fleetlab: Redis bridge: %v", err)
	}
	for i := range n {
		l.hosts = append(l.hosts, l.addHost(tb, i))
	}
	g, err := pktgen.Open(pktgen.Config{})
	if err != nil {
		tb.Fatalf("fleetlab: open generator: %v", err)
	}
	tb.Cleanup(func() { g.Close() })
	l.gen = g
	return l
}

func (l *Lab) addHost(tb testing.TB, i int) *Host {
	tb.Helper()
	h := &Host{
		Index: i,
		NS:    testutil.NewNetns(tb),
		Eth0:  fmt.Sprintf("xf%se%d", l.ID, i),
		Eth1:  fmt.Sprintf("xf%sr%d", l.ID, i),
		port:  fmt.Sprintf("p%d", i),
	}
	h.GenLink = testutil.NewVeth(tb, l.Generator, h.NS, testutil.VethConfig{
		Name: fmt.Sprintf("g%d", i), PeerName: h.Eth0,
		Addr:      netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 80, byte(i), 1}), 24),
		PeerAddr:  netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 80, byte(i), 2}), 24),
		Addr6:     netip.MustParsePrefix(fmt.Sprintf("fd00:80:%x::1/64", i)),
		PeerAddr6: netip.MustParsePrefix(fmt.Sprintf("fd00:80:%x::2/64", i)),
	})
	h.Eth0Addr, h.Eth0MAC = h.GenLink.PeerAddr, h.GenLink.PeerMAC

	// NewVeth addresses both ends; the bridge port's addresses are
	// throwaway ones, removed before it joins the bridge.
	v := testutil.NewVeth(tb, h.NS, l.RedisNS, testutil.VethConfig{
		Name: h.Eth1, PeerName: h.port,
		Addr:      netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 79, 0, byte(10 + i)}), 24),
		PeerAddr:  netip.PrefixFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}), 32),
		Addr6:     netip.MustParsePrefix(fmt.Sprintf("fd00:79::%x/64", 10+i)),
		PeerAddr6: netip.MustParsePrefix(fmt.Sprintf("fd00:79:ffff::%x/128", i)),
	})
	h.Eth1Addr = v.Addr
	if err := l.RedisNS.Do(func() error { return joinBridge(h.port) }); err != nil {
		tb.Fatalf("fleetlab: host %d bridge port: %v", i, err)
	}
	return h
}

const bridgeName = "br0"

func addBridge() error {
	la := netlink.NewLinkAttrs()
	la.Name = bridgeName
	br := &netlink.Bridge{LinkAttrs: la}
	if err := netlink.LinkAdd(br); err != nil {
		return err
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: RedisIP.AsSlice(), Mask: net.CIDRMask(24, 32)}}
	if err := netlink.AddrAdd(br, addr); err != nil {
		return err
	}
	return netlink.LinkSetUp(br)
}

// joinBridge strips port's addresses and enslaves it to the bridge; with
// STP off (the default) it forwards at once.
func joinBridge(port string) error {
	link, err := netlink.LinkByName(port)
	if err != nil {
		return err
	}
	addrs, err := netlink.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return err
	}
	for _, a := range addrs {
		if err := netlink.AddrDel(link, &a); err != nil {
			return fmt.Errorf("remove %v: %w", a.IPNet, err)
		}
	}
	br, err := netlink.LinkByName(bridgeName)
	if err != nil {
		return err
	}
	return netlink.LinkSetMaster(link, br)
}

// Hosts is the number of hosts.
func (l *Lab) Hosts() int { return len(l.hosts) }

// Host returns host i.
func (l *Lab) Host(i int) *Host { return l.hosts[i] }

// Namespaces lists every namespace of the lab, for checks that they are gone.
func (l *Lab) Namespaces() []*testutil.Netns {
	ns := []*testutil.Netns{l.Generator, l.RedisNS}
	for _, h := range l.hosts {
		ns = append(ns, h.NS)
	}
	return ns
}

// RedisAddr is "10.79.0.1:6379", where StartRedis listens.
func (l *Lab) RedisAddr() string { return netip.AddrPortFrom(RedisIP, RedisPort).String() }

// StartRedis starts a single redis-server at RedisAddr (password optional).
func (l *Lab) StartRedis(tb testing.TB, password string) *testutil.RedisServer {
	tb.Helper()
	return testutil.StartRedis(tb, l.RedisNS, testutil.RedisConfig{
		Addr: netip.AddrPortFrom(RedisIP, RedisPort), Password: password,
	})
}

// StartCluster starts a Redis Cluster on RedisIP; cfg.IP is overridden.
func (l *Lab) StartCluster(tb testing.TB, cfg testutil.RedisClusterConfig) *testutil.RedisCluster {
	tb.Helper()
	cfg.IP = RedisIP
	return testutil.StartRedisCluster(tb, l.RedisNS, cfg)
}

// Partition cuts host i off from Redis by setting its bridge port down:
// Eth1 stays configured but loses carrier, so packets are dropped silently
// and calls time out, as in a real partition, rather than failing at once.
func (l *Lab) Partition(tb testing.TB, i int) {
	tb.Helper()
	err := l.RedisNS.Do(func() error {
		link, err := netlink.LinkByName(l.hosts[i].port)
		if err != nil {
			return err
		}
		return netlink.LinkSetDown(link)
	})
	if err != nil {
		tb.Fatalf("fleetlab: partition host %d: %v", i, err)
	}
}

// Heal undoes Partition and returns once both ends have carrier again.
func (l *Lab) Heal(tb testing.TB, i int) {
	tb.Helper()
	h := l.hosts[i]
	err := l.RedisNS.Do(func() error {
		link, err := netlink.LinkByName(h.port)
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(link)
	})
	if err == nil {
		err = waitOperUp(l.RedisNS, h.port)
	}
	if err == nil {
		err = waitOperUp(h.NS, h.Eth1)
	}
	if err != nil {
		tb.Fatalf("fleetlab: heal host %d: %v", i, err)
	}
}

// waitOperUp waits (up to 5 s) for the kernel's linkwatch to see carrier:
// until then a device drops what it sends.
func waitOperUp(ns *testutil.Netns, name string) error {
	return ns.Do(func() error {
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			link, err := netlink.LinkByName(name)
			if err != nil {
				return err
			}
			if link.Attrs().OperState == netlink.OperUp {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s not up after 5 s (%v)", name, link.Attrs().OperState)
			}
		}
	})
}

// Eth0Stats reads host i's Eth0 counters from netlink. A veth counts the
// frames its XDP program received in rx_packets, whatever the verdict.
func (l *Lab) Eth0Stats(i int) (*netlink.LinkStatistics, error) {
	h := l.hosts[i]
	var st *netlink.LinkStatistics
	err := h.NS.Do(func() error {
		link, err := netlink.LinkByName(h.Eth0)
		if err != nil {
			return err
		}
		st = link.Attrs().Statistics
		return nil
	})
	if err == nil && st == nil {
		err = fmt.Errorf("no statistics for %s", h.Eth0)
	}
	return st, err
}
