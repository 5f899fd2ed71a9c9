// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"
)

// When says when a conversation check judges packets.
type When int

const (
	// WhenOff: the check does nothing and costs nothing.
	WhenOff When = iota
	// WhenUnderAttack: the check watches one packet in 64 and judges
	// every packet while some destination receives more than the
	// section's arm rate of packets it would drop.
	WhenUnderAttack
	// WhenAlways: the check judges every packet.
	WhenAlways
)

var whenNames = []string{"off", "under_attack", "always"}

func (w When) String() string { return whenNames[w] }

// ConvCheck is one check of the conversations: section.
type ConvCheck struct {
	When When
	// Shadow: what the check would drop is counted and logged, and the
	// rules judge it as if the check had passed it.
	Shadow bool
	// Conntrack: what the host forwards is judged by netfilter's
	// connection tracking (forwarded: conntrack), which must have an entry
	// for it; otherwise it passes untouched (forwarded: pass).
	Conntrack bool
}

// Conversations is the conversations: section: packets addressed to this
// host must belong to a conversation it has, which the kernel's socket
// tables prove. The zero value turns every check off.
type Conversations struct {
	// TCP: a TCP segment without SYN (an ACK, FIN, RST, data, a SYN-ACK)
	// must belong to a socket: a connection (established, time-wait,
	// half-open), or a listener with a valid SYN cookie.
	TCP ConvCheck
	// UDP: a datagram must reach a bound or connected socket.
	UDP ConvCheck
	// Reflection: a datagram from one of ReflectorPorts (a service
	// reflection floods abuse) to a port that is not one must answer a
	// request this host sent to that address and port within Window, and
	// a DNS answer must carry the query's ID.
	Reflection     ConvCheck
	ReflectorPorts []PortRange
	Window         time.Duration
	// EchoReplies: the guard judges ICMP echo replies too, which must
	// answer an echo request this host sent (true unless turned off).
	EchoReplies bool
	// ArmRate is the rate, in packets a second, of what a check would
	// drop at one destination (address, protocol, port) that arms an
	// under_attack check; below half of it for Hold, the check disarms.
	ArmRate uint64
	Hold    time.Duration
	// Set: the policy has a conversations: section.
	Set bool
}

// Defaults and bounds of the conversations: section.
const (
	DefaultArmRate = 1000
	DefaultArmHold = time.Minute
	// DefaultReflectionWindow is how long a request stays answerable.
	DefaultReflectionWindow = 30 * time.Second
	minReflectionWindow     = 100 * time.Millisecond
	maxReflectionWindow     = time.Hour
	maxArmRate              = 100_000_000
	minArmHold              = time.Second
	maxArmHold              = 24 * time.Hour
)

// DefaultReflectorPorts are the services reflection floods abuse most:
// QOTD 17, chargen 19, DNS 53, portmap 111, NTP 123, NetBIOS 137, SNMP 161,
// CLDAP 389, RIP 520, MS SQL 1434, SSDP 1900, ARD 3283, WS-Discovery
// 3702, Ubiquiti discovery 10001, memcached 11211.
var DefaultReflectorPorts = []PortRange{{17, 17}, {19, 19}, {53, 53}, {111, 111}, {123, 123}, {137, 137},
	{161, 161}, {389, 389}, {520, 520}, {1434, 1434}, {1900, 1900}, {3283, 3283}, {3702, 3702},
	{10001, 10001}, {11211, 11211}}

// DefaultConversations is the section of a policy without one: every
// check off, the arm rate and hold, the reflector ports and the window at
// their defaults.
func DefaultConversations() Conversations {
	return Conversations{ArmRate: DefaultArmRate, Hold: DefaultArmHold,
		ReflectorPorts: DefaultReflectorPorts, Window: DefaultReflectionWindow, EchoReplies: true}
}

// Any says whether some check is on.
func (c Conversations) Any() bool {
	return c.TCP.When != WhenOff || c.UDP.When != WhenOff || c.Reflection.When != WhenOff
}

// UnderAttack says whether some check is armed by the rate it watches.
func (c Conversations) UnderAttack() bool {
	return c.TCP.When == WhenUnderAttack || c.UDP.When == WhenUnderAttack || c.Reflection.When == WhenUnderAttack
}

// Equal says whether c and o are the same section.
func (c Conversations) Equal(o Conversations) bool {
	return c.TCP == o.TCP && c.UDP == o.UDP && c.Reflection == o.Reflection && c.ArmRate == o.ArmRate &&
		c.Hold == o.Hold && c.Window == o.Window && c.EchoReplies == o.EchoReplies &&
		slices.Equal(c.ReflectorPorts, o.ReflectorPorts)
}

func (c ConvCheck) String() string {
	s := c.When.String()
	if c.When != WhenOff && c.Shadow {
		s += ", in shadow (counted and logged, never dropped)"
	}
	if c.When != WhenOff && c.Conntrack {
		s += ", forwarded traffic judged by conntrack"
	}
	return s
}

// String renders the section as `policy check` prints it.
func (c Conversations) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "TCP without SYN to this host that no socket owns: %s; UDP to a port of this host without a socket: %s",
		c.TCP, c.UDP)
	if c.Reflection.When != WhenOff {
		ports := make([]string, len(c.ReflectorPorts))
		for i, p := range c.ReflectorPorts {
			ports[i] = p.String()
		}
		echo := ""
		if c.EchoReplies {
			echo = ", or an ICMP echo reply to no echo request"
		}
		fmt.Fprintf(&b, "; UDP from a reflector's port (%s) that answers no request sent there in the last %s%s: %s",
			strings.Join(ports, ","), formatDuration(c.Window), echo, c.Reflection)
	}
	if c.UnderAttack() {
		fmt.Fprintf(&b, "; under_attack arms at %d/s to one destination, disarms after %s below half of it",
			c.ArmRate, formatDuration(c.Hold))
	}
	return b.String()
}

// conversations decodes the top-level conversations section:
//
//	conversations:
//	  tcp: under_attack                     # off | under_attack | always
//	  udp: {when: always, action: shadow}   # action: drop (default) | shadow
//	  arm: {rate: 1000/s, hold: 1m}
//
// tcp and reflection also take forwarded: pass (default) | conntrack.
func (d *decoder) conversations(f field) Conversations {
	c := DefaultConversations()
	c.Set = true
	m := d.mapping(f.value, "conversations", "tcp", "udp", "reflection", "arm")
	if m == nil {
		return c
	}
	if cf, ok := m["tcp"]; ok {
		c.TCP, _ = d.convCheck(cf, "conversations.tcp")
	}
	if cf, ok := m["udp"]; ok {
		var m map[string]field
		c.UDP, m = d.convCheck(cf, "conversations.udp")
		if ff, ok := m["forwarded"]; ok && c.UDP.Conntrack {
			d.errorf(ff.value, "conversations.udp.forwarded", "conntrack cannot judge forwarded UDP: a datagram that "+
				"opens a new flow has no entry yet, so every new flow would be dropped; only tcp and reflection take conntrack")
		}
	}
	if cf, ok := m["reflection"]; ok {
		var m map[string]field
		c.Reflection, m = d.convCheck(cf, "conversations.reflection", "ports", "window", "echo_replies")
		d.reflection(m, &c)
	}
	if af, ok := m["arm"]; ok {
		d.convArm(af, &c)
	}
	if !c.Any() {
		d.warnf(f.key, "conversations", "every check is off: the section has no effect")
	}
	return c
}

// convCheck decodes one check: a word (when), or {when, action} and the
// check's own fields (more).
func (d *decoder) convCheck(f field, path string, more ...string) (ConvCheck, map[string]field) {
	n := d.deref(f.value, path)
	if n == nil {
		return ConvCheck{}, nil
	}
	if !isMappingNode(n) {
		w, _ := d.enum(n, path, "when", whenNames)
		return ConvCheck{When: When(w)}, nil
	}
	c := ConvCheck{When: WhenUnderAttack}
	m := d.mapping(n, path, append([]string{"when", "action", "forwarded"}, more...)...)
	if m == nil {
		return c, nil
	}
	if wf, ok := m["when"]; ok {
		w, _ := d.enum(wf.value, path+".when", "when", whenNames)
		c.When = When(w)
	}
	if af, ok := m["action"]; ok {
		a, _ := d.enum(af.value, path+".action", "action", []string{"drop", "shadow"})
		c.Shadow = a == 1
	}
	if ff, ok := m["forwarded"]; ok {
		fw, _ := d.enum(ff.value, path+".forwarded", "forwarded", []string{"pass", "conntrack"})
		c.Conntrack = fw == 1
	}
	return c, m
}

// convArm decodes arm: {rate, hold}.
func (d *decoder) convArm(f field, c *Conversations) {
	m := d.mapping(f.value, "conversations.arm", "rate", "hold")
	if m == nil {
		return
	}
	if rf, ok := m["rate"]; ok {
		if v, ok := d.packetRate(rf.value, "conversations.arm.rate", maxArmRate); ok {
			c.ArmRate = uint64(v)
		}
	}

	if hf, ok := m["hold"]; ok {
		d.boundedDuration(hf.value, "conversations.arm.hold", "1m", minArmHold, maxArmHold, &c.Hold)
	}
}

// isMappingNode says whether n (dereferenced) is a mapping.
func isMappingNode(n ast.Node) bool {
	switch n.(type) {
	case *ast.MappingNode, *ast.MappingValueNode:
		return true
	}
	return false
}

// reflection decodes the reflection check's own fields: ports, window and
// echo_replies.
func (d *decoder) reflection(m map[string]field, c *Conversations) {
	if ef, ok := m["echo_replies"]; ok {
		v, _ := d.enum(ef.value, "conversations.reflection.echo_replies", "value", []string{"false", "true"})
		c.EchoReplies = v == 1
	}
	if pf, ok := m["ports"]; ok {
		c.ReflectorPorts = d.ports(pf.value, "conversations.reflection.ports")
	}
	if wf, ok := m["window"]; ok {
		d.boundedDuration(wf.value, "conversations.reflection.window", "30s", minReflectionWindow, maxReflectionWindow, &c.Window)
	}
}
