// SPDX-License-Identifier: Apache-2.0

package netns

import (
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// VethConfig describes a veth pair; the zero value gives the defaults below.
// The default addresses come from the benchmarking ranges (198.18.0.0/15,
// RFC 2544; 2001:2::/48, RFC 5180) so they never collide with a real network.
type VethConfig struct {
	// Name and PeerName name the two ends inside their own namespaces
	// (defaults "xdpl0" and "xdpl1").
	Name, PeerName string
	// Queues sets NumTxQueues and NumRxQueues on both ends (default 1).
	// XDP_TX into a veth picks the peer's RX queue by the sending CPU, so
	// give a multi-CPU flood as many queues as CPUs to spread it.
	Queues int
	// Addr/PeerAddr and Addr6/PeerAddr6 default to 198.18.0.1/24,
	// 198.18.0.2/24, 2001:2::1/64 and 2001:2::2/64.
	Addr, PeerAddr, Addr6, PeerAddr6 netip.Prefix
}

func (c *VethConfig) setDefaults() {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	defp := func(p *netip.Prefix, v string) {
		if !p.IsValid() {
			*p = netip.MustParsePrefix(v)
		}
	}
	def(&c.Name, "xdpl0")
	def(&c.PeerName, "xdpl1")
	if c.Queues <= 0 {
		c.Queues = 1
	}
	defp(&c.Addr, "198.18.0.1/24")
	defp(&c.PeerAddr, "198.18.0.2/24")
	defp(&c.Addr6, "2001:2::1/64")
	defp(&c.PeerAddr6, "2001:2::2/64")
}

// Veth is a veth pair whose ends live in two namespaces, both up and
// addressed. By convention NS is the sending side and PeerNS the receiver.
type Veth struct {
	NS, PeerNS       *Netns
	Name, PeerName   string
	Index, PeerIndex int
	MAC, PeerMAC     net.HardwareAddr
	// Addresses without prefix length.
	Addr, PeerAddr, Addr6, PeerAddr6 netip.Addr
	Queues                           int
}

// NewVeth creates a veth pair with one end in ns and the other in peerNS,
// assigns addresses (IPv6 without duplicate address detection, so they are
// usable at once), sets both ends up and turns rp_filter off in both
// namespaces: random source addresses must reach the receiving stack. It
// also stops IPv6 from generating link-local addresses and sending router
// solicitations, which cuts the background packets in the SNMP counters
// tests compare; a few remain (neighbour discovery, MLD reports from ::),
// so compare IP counters with a margin. It returns once both ends are
// operationally up. The pair disappears with either namespace.
func NewVeth(ns, peerNS *Netns, cfg VethConfig) (*Veth, error) {
	v, err := newVeth(ns, peerNS, cfg)
	if err != nil {
		return nil, fmt.Errorf("veth %s<->%s: %w", ns, peerNS, err)
	}
	return v, nil
}

func newVeth(ns, peerNS *Netns, cfg VethConfig) (*Veth, error) {
	cfg.setDefaults()
	if ns == peerNS {
		return nil, fmt.Errorf("both ends in the same namespace %s", ns)
	}
	v := &Veth{
		NS: ns, PeerNS: peerNS,
		Name: cfg.Name, PeerName: cfg.PeerName,
		Addr: cfg.Addr.Addr(), PeerAddr: cfg.PeerAddr.Addr(),
		Addr6: cfg.Addr6.Addr(), PeerAddr6: cfg.PeerAddr6.Addr(),
		Queues: cfg.Queues,
	}

	err := ns.Do(func() error {
		h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return err
		}
		defer h.Close()
		la := netlink.NewLinkAttrs()
		la.Name = cfg.Name
		la.NumTxQueues = cfg.Queues
		la.NumRxQueues = cfg.Queues
		link := &netlink.Veth{
			LinkAttrs:       la,
			PeerName:        cfg.PeerName,
			PeerTxQLen:      -1,
			PeerNumTxQueues: uint32(cfg.Queues),
			PeerNumRxQueues: uint32(cfg.Queues),
			PeerNamespace:   netlink.NsFd(peerNS.f.Fd()),
		}
		if err := h.LinkAdd(link); err != nil {
			return fmt.Errorf("create veth: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}

	v.Index, v.MAC, err = setupEnd(ns, cfg.Name, cfg.Addr, cfg.Addr6)
	if err != nil {
		return nil, err
	}
	v.PeerIndex, v.PeerMAC, err = setupEnd(peerNS, cfg.PeerName, cfg.PeerAddr, cfg.PeerAddr6)
	if err != nil {
		return nil, err
	}
	for _, end := range []struct {
		ns   *Netns
		name string
	}{{ns, cfg.Name}, {peerNS, cfg.PeerName}} {
		if err := waitOperUp(end.ns, end.name, 5*time.Second); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// waitOperUp waits until the kernel's linkwatch has seen the carrier: until
// then the device transmits through noop_qdisc, which drops everything, and
// linkwatch may take up to a second. The first ARP or neighbour
// solicitation would be lost and retried a second later.
func waitOperUp(ns *Netns, name string, timeout time.Duration) error {
	return ns.Do(func() error {
		h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return err
		}
		defer h.Close()
		deadline := time.Now().Add(timeout)
		for {
			link, err := h.LinkByName(name)
			if err != nil {
				return fmt.Errorf("find %s: %w", name, err)
			}
			if link.Attrs().OperState == netlink.OperUp {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s not operationally up after %v (state %v)", name, timeout, link.Attrs().OperState)
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
}

// setupEnd configures one end from inside its namespace and returns its
// ifindex and MAC address.
func setupEnd(ns *Netns, name string, addr, addr6 netip.Prefix) (int, net.HardwareAddr, error) {
	var (
		index int
		mac   net.HardwareAddr
	)
	err := ns.Do(func() error {
		for key, val := range map[string]string{
			"net.ipv4.conf.all.rp_filter":                     "0",
			"net.ipv4.conf.default.rp_filter":                 "0",
			"net.ipv4.conf." + name + ".rp_filter":            "0",
			"net.ipv6.conf." + name + ".addr_gen_mode":        "1", // no link-local address
			"net.ipv6.conf." + name + ".accept_ra":            "0",
			"net.ipv6.conf." + name + ".router_solicitations": "0",
		} {
			if err := writeSysctl(key, val); err != nil {
				return err
			}
		}

		h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return err
		}
		defer h.Close()
		link, err := h.LinkByName(name)
		if err != nil {
			return fmt.Errorf("find %s: %w", name, err)
		}
		for _, p := range []netip.Prefix{addr, addr6} {
			a := &netlink.Addr{IPNet: &net.IPNet{
				IP:   p.Addr().AsSlice(),
				Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen()),
			}}
			if p.Addr().Is6() {
				a.Flags = unix.IFA_F_NODAD
			}
			if err := h.AddrAdd(link, a); err != nil {
				return fmt.Errorf("add %s to %s: %w", p, name, err)
			}
		}
		if err := h.LinkSetUp(link); err != nil {
			return fmt.Errorf("set %s up: %w", name, err)
		}
		index = link.Attrs().Index
		mac = link.Attrs().HardwareAddr
		return nil
	})
	return index, mac, err
}
