// SPDX-License-Identifier: Apache-2.0

package maps

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/gen"
)

// ConvCheck is how one conversation check runs (bpf/conversation.h).
type ConvCheck struct {
	// On: the check judges packets, while the control plane arms it
	// (SetConvArmed) or, with Always, at all times. Off, it costs nothing.
	On     bool
	Always bool
	// Shadow: what the check would drop is counted and sampled, and the
	// rules then judge it as if the check had passed it.
	Shadow bool
	// Conntrack: what the host forwards (a destination not its own) is
	// judged by netfilter's connection tracking, which must have an entry
	// for it; without, it passes. The TCP check and the reflection guard
	// only (a forwarded datagram may open a flow).
	Conntrack bool
}

// Conversations is the conversation checks of a policy: TCP without SYN to
// this host must belong to a socket, UDP must reach one, and a datagram
// from a reflector's port must answer a request this host sent.
type Conversations struct {
	TCP, UDP ConvCheck
	// Reflection is the reflection guard: a datagram from one of
	// ReflectorPorts, to a port that is not one, must answer a request
	// this host sent there within ReflectionWindow (the egress program,
	// EgressProgram, records them).
	Reflection       ConvCheck
	ReflectorPorts   []uint16
	ReflectionWindow time.Duration
	// EchoReplies: the guard also judges ICMP and ICMPv6 echo replies,
	// which must answer an echo request this host sent (its identifier).
	EchoReplies bool
}

// Check names a conversation check, the index of its watch and of its bit
// in SetConvArmed.
type Check int

const (
	CheckTCP = Check(gen.XdplimitXdplConstXDPL_CONV_TCP)
	CheckUDP = Check(gen.XdplimitXdplConstXDPL_CONV_UDP)
	// CheckReflection is the reflection guard.
	CheckReflection = Check(gen.XdplimitXdplConstXDPL_CONV_REFLECTION)
	// Checks is the number of conversation checks.
	Checks = int(gen.XdplimitXdplConstXDPL_CONV_CHECKS)
	// ConvSlots is the number of destination slots in each check's watch.
	ConvSlots = int(gen.XdplimitXdplConstXDPL_CONV_SLOTS)
	// ConvWatchEvery: a check that is not armed looks up one packet in
	// this many, per CPU.
	ConvWatchEvery = int(gen.XdplimitXdplConstXDPL_CONV_WATCH_EVERY)
	// LocalMax is how many addresses and prefixes SetLocal takes.
	LocalMax = int(gen.XdplimitXdplConstXDPL_LOCAL_MAX)
)

func (c Check) String() string {
	switch c {
	case CheckTCP:
		return "tcp"
	case CheckUDP:
		return "udp"
	case CheckReflection:
		return "reflection"
	}
	return fmt.Sprintf("check(%d)", int(c))
}

// Of returns the configuration of check c.
func (cv Conversations) Of(c Check) ConvCheck {
	switch c {
	case CheckUDP:
		return cv.UDP
	case CheckReflection:
		return cv.Reflection
	}
	return cv.TCP
}

// AllChecks lists the conversation checks.
var AllChecks = []Check{CheckTCP, CheckUDP, CheckReflection}

// Any says whether some check is on.
func (cv Conversations) Any() bool { return cv.TCP.On || cv.UDP.On || cv.Reflection.On }

// checkBits are a check's generation flags (bpf/xdplimit_consts.h): on,
// always, in shadow, and judged by conntrack where forwarded (0: the check
// cannot be).
type checkBits struct{ on, always, shadow, ct uint32 }

var convBits = map[Check]checkBits{
	CheckTCP: {uint32(gen.XdplimitXdplConstXDPL_GF_CONV_TCP), uint32(gen.XdplimitXdplConstXDPL_GF_CONV_TCP_ALWAYS),
		uint32(gen.XdplimitXdplConstXDPL_GF_CONV_TCP_SHADOW), uint32(gen.XdplimitXdplConstXDPL_GF_CONV_TCP_CT)},
	CheckUDP: {uint32(gen.XdplimitXdplConstXDPL_GF_CONV_UDP), uint32(gen.XdplimitXdplConstXDPL_GF_CONV_UDP_ALWAYS),
		uint32(gen.XdplimitXdplConstXDPL_GF_CONV_UDP_SHADOW), 0},
	CheckReflection: {uint32(gen.XdplimitXdplConstXDPL_GF_CONV_REFL), uint32(gen.XdplimitXdplConstXDPL_GF_CONV_REFL_ALWAYS),
		uint32(gen.XdplimitXdplConstXDPL_GF_CONV_REFL_SHADOW), uint32(gen.XdplimitXdplConstXDPL_GF_CONV_REFL_CT)},
}

// check validates the section: conntrack judges only what a check can
// prove by it.
func (cv Conversations) check() error {
	for _, c := range AllChecks {
		if cc := cv.Of(c); cc.Conntrack && (!cc.On || convBits[c].ct == 0) {
			return fmt.Errorf("conversation check %v: conntrack lookups only for the tcp check and the reflection guard, while on", c)
		}
	}
	return nil
}

// Conntrack says whether some check judges forwarded packets by conntrack.
func (cv Conversations) Conntrack() bool { return cv.TCP.Conntrack || cv.Reflection.Conntrack }

func (cv Conversations) flags() uint32 {
	var f uint32
	for _, c := range AllChecks {
		cc, b := cv.Of(c), convBits[c]
		if !cc.On {
			continue
		}
		f |= b.on
		if cc.Always {
			f |= b.always
		}
		if cc.Shadow {
			f |= b.shadow
		}
		if cc.Conntrack {
			f |= b.ct
		}
	}
	if cv.Reflection.On && cv.EchoReplies {
		f |= uint32(gen.XdplimitXdplConstXDPL_GF_CONV_ECHO)
	}
	return f
}

// localKey is xdpl_local's key for p: IPv4 as IPv4-mapped IPv6.
func localKey(p netip.Prefix) gen.XdplimitXdplLocalKey {
	a, bits := p.Addr(), p.Bits()
	if a.Is4() {
		a, bits = netip.AddrFrom16(a.As16()), bits+96
	}
	return gen.XdplimitXdplLocalKey{Prefixlen: uint32(bits), Addr: a.As16()}
}

// SetLocal makes the datapath's table of this host's local addresses and
// prefixes (the local routing table's) hold exactly want: what is new is
// added before what went is deleted, so that an address in both the old
// and the new table is never missing. Only what is addressed to one of
// them is judged by the conversation checks.
func (l *Limiter) SetLocal(want []netip.Prefix) error {
	if len(want) > LocalMax {
		return fmt.Errorf("%d local addresses and prefixes, the datapath holds %d", len(want), LocalMax)
	}
	keep := map[gen.XdplimitXdplLocalKey]bool{}
	for _, p := range want {
		if !p.IsValid() {
			return fmt.Errorf("invalid local prefix %v", p)
		}
		keep[localKey(p.Masked())] = true
	}
	one := uint8(1)
	for k := range keep {
		if err := l.objs.XdplLocal.Update(k, one, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("adding local prefix %v: %w", k, err)
		}
	}
	var gone []gen.XdplimitXdplLocalKey
	var k gen.XdplimitXdplLocalKey
	var v uint8
	it := l.objs.XdplLocal.Iterate()
	for it.Next(&k, &v) {
		if !keep[k] {
			gone = append(gone, k)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("reading local prefixes: %w", err)
	}
	for _, k := range gone {
		if err := l.objs.XdplLocal.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("deleting local prefix: %w", err)
		}
	}
	return nil
}

// Local returns the datapath's table of local addresses and prefixes.
func (l *Limiter) Local() ([]netip.Prefix, error) {
	var out []netip.Prefix
	var k gen.XdplimitXdplLocalKey
	var v uint8
	it := l.objs.XdplLocal.Iterate()
	for it.Next(&k, &v) {
		a, bits := netip.AddrFrom16(k.Addr), int(k.Prefixlen)
		if a.Is4In6() && bits >= 96 {
			a, bits = a.Unmap(), bits-96
		}
		out = append(out, netip.PrefixFrom(a, bits))
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	return out, it.Err()
}

// SetConvArmed arms the checks in armed (the others are disarmed): an
// armed check judges every packet, one that is not only watches.
func (l *Limiter) SetConvArmed(armed ...Check) error {
	var ctl gen.XdplimitXdplConvCtl
	for _, c := range armed {
		ctl.Armed |= 1 << uint(c)
	}
	return l.objs.XdplConvCtl.Update(uint32(0), &ctl, ebpf.UpdateAny)
}

// ConvArmed returns the checks armed now.
func (l *Limiter) ConvArmed() ([]Check, error) {
	var ctl gen.XdplimitXdplConvCtl
	if err := l.objs.XdplConvCtl.Lookup(uint32(0), &ctl); err != nil {
		return nil, err
	}
	var out []Check
	for c := Check(0); int(c) < Checks; c++ {
		if ctl.Armed&(1<<uint(c)) != 0 {
			out = append(out, c)
		}
	}
	return out, nil
}

// WatchSlot is one destination slot of a check's watch: the packets the
// check dropped there, or would have dropped (estimated from the packets it
// looked up while not armed), summed over the CPUs since the limiter was
// loaded; and the last destination counted.
type WatchSlot struct {
	Packets     uint64
	Destination netip.Addr
	Protocol    uint8
	Port        uint16
}

// ConvWatch reads check c's watch, ConvSlots slots.
func (l *Limiter) ConvWatch(c Check) ([]WatchSlot, error) {
	out := make([]WatchSlot, ConvSlots)
	var vals []gen.XdplimitXdplConvWatch
	for i := range out {
		if err := l.objs.XdplConvWatch.Lookup(uint32(int(c)*ConvSlots+i), &vals); err != nil {
			return nil, fmt.Errorf("reading the %v watch: %w", c, err)
		}
		s := &out[i]
		for _, v := range vals {
			s.Packets += v.Packets
			if v.Family != 0 && !s.Destination.IsValid() {
				s.Destination, s.Protocol, s.Port = addrOf(v.Family, v.Daddr), v.Proto, v.Dport
			}
		}
	}
	return out, nil
}

// ConversationsInForce returns the conversation checks of the policy in
// force, read back from its generation's flags.
func (l *Limiter) ConversationsInForce() (Conversations, error) {
	g, ctl, err := l.active()
	if err != nil {
		return Conversations{}, err
	}
	f := ctl.Gen[g].Flags
	check := func(c Check) ConvCheck {
		b := convBits[c]
		return ConvCheck{On: f&b.on != 0, Always: f&b.always != 0, Shadow: f&b.shadow != 0, Conntrack: b.ct != 0 && f&b.ct != 0}
	}
	return Conversations{
		TCP:              check(CheckTCP),
		UDP:              check(CheckUDP),
		Reflection:       check(CheckReflection),
		ReflectionWindow: time.Duration(ctl.Gen[g].ReflWindowNs),
		EchoReplies:      f&uint32(gen.XdplimitXdplConstXDPL_GF_CONV_ECHO) != 0,
	}, nil
}

// When names how c runs: off, under_attack or always.
func (c ConvCheck) When() string {
	switch {
	case !c.On:
		return "off"
	case c.Always:
		return "always"
	}
	return "under_attack"
}

// JudgesAll says whether check c judges every packet now: it is on, and
// always or among armed (ConvArmed).
func (cv Conversations) JudgesAll(c Check, armed []Check) bool {
	cc := cv.Of(c)
	return cc.On && (cc.Always || slices.Contains(armed, c))
}
