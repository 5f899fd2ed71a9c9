// SPDX-License-Identifier: Apache-2.0

package maps

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/xdplimit/xdplimit/gen"
)

// Why says what decided a packet.
type Why uint32

const (
	WhyNonIP     = Why(gen.XdplimitXdplConstXDPL_WHY_NON_IP)
	WhyMalformed = Why(gen.XdplimitXdplConstXDPL_WHY_MALFORMED)
	WhyAllow     = Why(gen.XdplimitXdplConstXDPL_WHY_ALLOW)
	WhyDeny      = Why(gen.XdplimitXdplConstXDPL_WHY_DENY)
	WhyUnmatched = Why(gen.XdplimitXdplConstXDPL_WHY_UNMATCHED)
	WhyRule      = Why(gen.XdplimitXdplConstXDPL_WHY_RULE)
	WhyBan       = Why(gen.XdplimitXdplConstXDPL_WHY_BAN)
	// WhyCookieACK: a TCP ACK to a listener whose SYN cookie was wrong.
	WhyCookieACK = Why(gen.XdplimitXdplConstXDPL_WHY_COOKIE_ACK)
	// WhyNoConnection: TCP without SYN to this host that no socket owns;
	// WhyNoSocket: UDP to a port of this host without a socket.
	WhyNoConnection = Why(gen.XdplimitXdplConstXDPL_WHY_NO_CONNECTION)
	WhyNoSocket     = Why(gen.XdplimitXdplConstXDPL_WHY_NO_SOCKET)
	// WhyNoRequest: a datagram from a reflector's port that answers no
	// request this host sent.
	WhyNoRequest = Why(gen.XdplimitXdplConstXDPL_WHY_NO_REQUEST)
)

func (w Why) String() string {
	switch w {
	case WhyNonIP:
		return "non-IP"
	case WhyMalformed:
		return "malformed"
	case WhyAllow:
		return "allow list"
	case WhyDeny:
		return "deny list"
	case WhyUnmatched:
		return "unmatched"
	case WhyRule:
		return "rule"
	case WhyBan:
		return "ban"
	case WhyCookieACK:
		return "wrong SYN cookie"
	case WhyNoConnection:
		return "no connection"
	case WhyNoSocket:
		return "no socket"
	case WhyNoRequest:
		return "no request"
	}
	return fmt.Sprintf("why(%d)", uint32(w))
}

// Decision is what the program recorded for the last packet (Options.Record).
type Decision struct {
	Why     Why
	Verdict Verdict
	Rule    int // index in the policy, -1 when no rule decided
	Level   int // refusing level in policy order (0 = own limit), -1 if none refused
	// Key is the state key of the refusing level (or the rule's first
	// evaluated level when it admitted): the masked source, and the
	// destination port for src_ip+dst_port keys (source port for
	// src_ip+src_port); invalid for global keys.
	Source netip.Addr // the source masked to the level's prefix
	Port   uint16
}

// LastDecision reads the decision recorded for the last packet.
func (l *Limiter) LastDecision() (Decision, error) {
	var d gen.XdplimitXdplDecision
	if err := l.objs.XdplLast.Lookup(uint32(0), &d); err != nil {
		return Decision{}, err
	}
	out := Decision{Why: Why(d.Why), Verdict: Verdict(d.Verdict), Rule: int(d.Rule), Level: int(d.Level), Port: d.Key.Port}
	out.Source = addrOf(d.Key.Family, d.Key.Addr)
	return out, nil
}

// addrOf decodes an address as the datapath stores it (IPv4 in the first
// word), or the zero Addr for a family other than 4 and 6.
func addrOf(family uint8, words [4]uint32) netip.Addr {
	var b [16]byte
	for k, w := range words {
		binary.NativeEndian.PutUint32(b[k*4:], w)
	}
	switch family {
	case 4:
		return netip.AddrFrom4([4]byte(b[:4]))
	case 6:
		return netip.AddrFrom16(b)
	}
	return netip.Addr{}
}
