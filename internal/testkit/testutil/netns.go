// SPDX-License-Identifier: Apache-2.0

package testutil

import (
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xdplimit/xdplimit/internal/netns"
)

const (
	// NetnsDir is where named namespaces are bind-mounted (netns.Dir).
	NetnsDir = netns.Dir

	// NetnsPrefix starts the name of every namespace the tests create, so
	// netns.CleanupStale can find the ones a killed run left behind.
	NetnsPrefix = "xdpltest-"
)

// Netns is a network namespace owned by one test: a netns.Netns that the
// test's cleanup deletes, plus test helpers.
type Netns struct{ *netns.Netns }

// Counters is a snapshot of a namespace's SNMP counters (netns.Counters).
type Counters = netns.Counters

// VethConfig describes a veth pair (netns.VethConfig).
type VethConfig = netns.VethConfig

// Veth is a veth pair between two test namespaces: a netns.Veth whose NS and
// PeerNS carry the test helpers.
type Veth struct {
	netns.Veth
	NS, PeerNS *Netns
}

var setupOnce sync.Once

// NewNetns creates a named network namespace with loopback up, and deletes
// it in tb.Cleanup, which runs even when the test fails. The first call in a
// process also sweeps namespaces left by dead test processes and installs
// netns.CloseOnSignal (netns.Prepare), which deletes this
// process's namespaces on SIGINT/SIGTERM/SIGHUP before the signal's default
// action kills it. A test binary killed by SIGKILL or by `go test -timeout`
// (which panics) cannot clean up; the next run's sweep removes what it left.
func NewNetns(tb testing.TB) *Netns {
	tb.Helper()
	RequireRoot(tb)
	setupOnce.Do(func() { netns.Prepare(NetnsPrefix, tb.Logf) })
	n, err := netns.New(NetnsPrefix)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := n.Close(); err != nil {
			tb.Errorf("delete network namespace %s: %v", n, err)
		}
	})
	return &Netns{n}
}

// Snapshot is Counters for tests: it fails the test on error.
func (n *Netns) Snapshot(tb testing.TB) Counters {
	tb.Helper()
	c, err := n.Counters()
	if err != nil {
		tb.Fatalf("read SNMP counters of %s: %v", n, err)
	}
	return c
}

// Settle waits until the namespace's stack stops taking in packets and
// returns its counters then: frames still in veth rings or softirq backlogs
// arrive after a generator's Send returns. Settled means IP receives did not
// move for 20 ms; after 50 tries (about a second) it returns the last
// snapshot, and the test's own checks judge what arrived.
func (n *Netns) Settle(tb testing.TB) Counters {
	tb.Helper()
	prev := n.Snapshot(tb)
	for range 50 {
		time.Sleep(20 * time.Millisecond)
		cur := n.Snapshot(tb)
		if cur.IPReceives() == prev.IPReceives() {
			return cur
		}
		prev = cur
	}
	return prev
}

// NewVethPair creates two namespaces and a veth pair between them.
func NewVethPair(tb testing.TB, cfg VethConfig) *Veth {
	tb.Helper()
	return NewVeth(tb, NewNetns(tb), NewNetns(tb), cfg)
}

// NewUniqueVethPair is NewVethPair with name and peer each followed by one
// UniqueID: xdplimit pins live under /sys/fs/bpf/xdplimit/<interface>,
// shared with every other test process on the machine, so the name of an
// interface a test attaches to must not repeat between them.
func NewUniqueVethPair(tb testing.TB, name, peer string) *Veth {
	tb.Helper()
	id := UniqueID(tb, name, peer)
	return NewVethPair(tb, VethConfig{Name: name + id, PeerName: peer + id})
}

// NewVeth is netns.NewVeth for tests: it fails the test on error. The pair
// disappears with either namespace.
func NewVeth(tb testing.TB, ns, peerNS *Netns, cfg VethConfig) *Veth {
	tb.Helper()
	v, err := netns.NewVeth(ns.Netns, peerNS.Netns, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return &Veth{Veth: *v, NS: ns, PeerNS: peerNS}
}

// XDPProgID is the id of the XDP program attached to iface in n, 0 if none.
func (n *Netns) XDPProgID(tb testing.TB, iface string) uint32 {
	tb.Helper()
	if x := n.link(tb, iface).Attrs().Xdp; x != nil && x.Attached {
		return x.ProgId
	}
	return 0
}

// RxDropped is iface's rx_dropped in n: on a veth's receiving end, the
// frames a full ring turned away before any XDP program there saw them.
func (n *Netns) RxDropped(tb testing.TB, iface string) uint64 {
	tb.Helper()
	if st := n.link(tb, iface).Attrs().Statistics; st != nil {
		return st.RxDropped
	}
	return 0
}

// RxSeen is what iface in n has taken in or dropped so far: its
// rx_packets plus rx_dropped, from one read. On a veth's receiving end with
// NAPI (an XDP program attached natively) rx_packets is the frames its NAPI
// poll took from the ring, whatever the program did with them (without
// NAPI veth counts a frame when it is sent), and rx_dropped those the full
// ring turned away (RxDropped).
func (n *Netns) RxSeen(tb testing.TB, iface string) uint64 {
	tb.Helper()
	if st := n.link(tb, iface).Attrs().Statistics; st != nil {
		return st.RxPackets + st.RxDropped
	}
	return 0
}

// WaitRx waits until iface in n has taken in or dropped at least want
// frames since RxSeen read rx, for at most 10 s, and reports whether it
// did. A frame still in a veth ring is counted by no one yet, and when the
// ring's NAPI poll waits for a CPU (in ksoftirqd on a busy host, or a
// starved vCPU under emulation) the stack can stay quiet for longer than
// Settle's 20 ms before it arrives. Run Settle after it: the stack may
// still be handling the last frames.
func (n *Netns) WaitRx(tb testing.TB, iface string, rx, want uint64) bool {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if n.RxSeen(tb, iface)-rx >= want {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// link reads iface's attributes and statistics in n, now.
func (n *Netns) link(tb testing.TB, iface string) netlink.Link {
	tb.Helper()
	var l netlink.Link
	err := n.Do(func() error {
		var err error
		l, err = netlink.LinkByName(iface)
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	return l
}
