// SPDX-License-Identifier: Apache-2.0

package maps

import (
	"fmt"

	"github.com/xdplimit/xdplimit/gen"
)

// SynAck is what a SYN-ACK carrying a SYN cookie offers (bpf/syncookie.h):
// what the host's own stack would put in its SYN-ACK, so that a connection
// opened by cookie runs as one the stack opened. The zero SynAck means
// DefaultSynAck.
type SynAck struct {
	// MSS4 and MSS6 cap the MSS the cookie's table picks: the largest
	// segment the interface takes (MTU - 40, MTU - 60).
	MSS4, MSS6 uint16
	// TTL and HopLimit of the answer.
	TTL, HopLimit uint8
	// WScale is the window scale the stack will use for the connection
	// (tcp_select_initial_window: from the largest receive buffer).
	WScale uint8
	// Timestamps: answer a SYN that carries timestamps with one, whose
	// low bits keep the window scale, SACK and ECN for the connection. It
	// needs net.ipv4.tcp_timestamps=2: with 1 the kernel decodes them
	// after subtracting a per-connection offset only it knows.
	Timestamps bool
	// SACK, WindowScaling and ECN: what the stack accepts back in a
	// cookie (net.ipv4.tcp_sack, tcp_window_scaling, tcp_ecn).
	SACK, WindowScaling, ECN bool
}

// DefaultSynAck is what a Linux host with an MTU of 1500 and default
// sysctls offers (with tcp_timestamps=2): for replay, tests and images
// nobody measured a host for.
var DefaultSynAck = SynAck{MSS4: 1460, MSS6: 1440, TTL: 64, HopLimit: 64, WScale: 7,
	Timestamps: true, SACK: true, WindowScaling: true, ECN: true}

// Check reports a SynAck the datapath cannot send.
func (s SynAck) Check() error {
	switch {
	case s == SynAck{}:
		return nil
	case s.MSS4 < 536 || s.MSS6 < 1220:
		return fmt.Errorf("syn-ack MSS %d/%d: below the IPv4 and IPv6 minimum segments (536, 1220)", s.MSS4, s.MSS6)
	case s.TTL == 0 || s.HopLimit == 0:
		return fmt.Errorf("syn-ack TTL %d, hop limit %d: 1 to 255", s.TTL, s.HopLimit)
	case s.WScale > 14:
		return fmt.Errorf("syn-ack window scale %d: 0 to 14", s.WScale)
	}
	return nil
}

func (s SynAck) cfg() gen.XdplimitXdplSynackCfg {
	if s == (SynAck{}) {
		s = DefaultSynAck
	}
	c := gen.XdplimitXdplSynackCfg{Mss4: s.MSS4, Mss6: s.MSS6, Ttl: s.TTL, Hoplimit: s.HopLimit, Wscale: s.WScale}
	for _, f := range []struct {
		on  bool
		bit uint8
	}{
		{s.Timestamps, synackTS}, {s.SACK, synackSACK}, {s.WindowScaling, synackWScale}, {s.ECN, synackECN},
	} {
		if f.on {
			c.Flags |= f.bit
		}
	}
	return c
}

const (
	synackTS     = uint8(gen.XdplimitXdplConstXDPL_SYNACK_TS)
	synackSACK   = uint8(gen.XdplimitXdplConstXDPL_SYNACK_SACK)
	synackWScale = uint8(gen.XdplimitXdplConstXDPL_SYNACK_WSCALE)
	synackECN    = uint8(gen.XdplimitXdplConstXDPL_SYNACK_ECN)
)
