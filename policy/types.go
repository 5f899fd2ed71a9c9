// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Policy is a validated, normalised policy file. Every value in it is within
// what the datapath can represent, so the compiler that turns it into map
// entries never has to reject anything.
type Policy struct {
	Path   string   // the policy file as passed to Load or Parse
	SHA256 [32]byte // of the policy file's bytes (list files are not included)
	Mode   Mode
	Rules  []Rule // in file order: the first matching rule wins

	// Allow and Deny are checked before any rule. They are masked,
	// deduplicated and sorted; IPv4 (also IPv4-mapped IPv6) is 4-byte. An
	// address in both decides by the longest matching prefix; the same prefix
	// in both is rejected.
	Allow, Deny []netip.Prefix
	// ListFiles are the allow and deny list files and the geoip:
	// databases the policy names, resolved against the policy file's
	// directory, deduplicated, in the order first named. Their contents
	// are in Allow, Deny and the rules, not in SHA256: whatever reloads on
	// change must watch them too.
	ListFiles []string
	// Unparsed is what happens to frames the parser cannot judge.
	Unparsed Unparsed
	// Conversations is the conversations: section, defaults applied:
	// which packets to this host must belong to a socket.
	Conversations Conversations

	// Fleet is the fleet: section, nil when the policy has none. Levels
	// with Scope ScopeFleet exist only when it is set.
	Fleet *Fleet
	// Log is the log: section (the drop log); its zero value has the
	// defaults and Set false.
	Log Log
	// Capture is the capture: section; the zero value (no section) is off.
	Capture Capture
	// Autopilot is the autopilot: section, defaults applied; nil when the
	// policy has none, which leaves the autopilot off.
	Autopilot *Autopilot
	// Bans is the bans: section, defaults applied: how far bans from the
	// fleet's Redis and ban feeds may reach.
	Bans BanLimits
	// CrowdSec is the crowdsec: section, nil when the policy has none.
	CrowdSec *CrowdSec
	// GeoIP is the geoip: section and what came of its databases, nil
	// when the policy has neither the section nor countries or ASNs.
	GeoIP *GeoIP
	// Reject is the reject: section, defaults applied: the budget of the
	// answers of rules with action reject.
	Reject Reject

	Warnings []Diagnostic // sorted by position, like errors
}

// Rule is one rule of a policy.
type Rule struct {
	Name string
	Line int // line of the rule in the policy file, for messages and metrics
	// Match selects the packets the rule applies to. All its constraints must hold.
	Match Match
	// Levels[0] is the rule's own key and limit; aggregate levels follow in
	// file order. A packet conforms only if it conforms on every level.
	Levels []Level
	// Action is what happens to a packet over a limit. It is ActionShadow for
	// every rule when the policy's Mode is ModeShadow.
	Action Action
	// Ban is set with action ban, and with action shadow (or mode shadow)
	// when the rule names a ban: then the ban is recorded and counted as
	// would-drop, never enforced.
	Ban *Ban
}

// Ban is what a rule bans when a packet exceeds its limit: the packet's
// source, masked to BanKey's prefixes, for For.
type Ban struct {
	For time.Duration
	// IPv4Prefix and IPv6Prefix are the rule's own key's (a ban is of a
	// source prefix: a src_ip+dst_port key bans the source prefix on every
	// port); a global key bans the single address, /32 or /128.
	IPv4Prefix, IPv6Prefix int
}

// MinBan and MaxBan bound a ban's duration.
const (
	MinBan = time.Second
	MaxBan = 30 * 24 * time.Hour
)

// Match is the set of packets a rule applies to. An empty field matches
// anything on that dimension; the zero Match (with Protocol ProtoAny) matches
// every IP packet.
type Match struct {
	Protocol           Protocol
	SrcPorts, DstPorts []PortRange    // sorted, merged (overlapping and adjacent ranges joined); only with TCP or UDP
	SrcCIDRs, DstCIDRs []netip.Prefix // masked, deduplicated, sorted; IPv4 as 4-byte addresses
	TCPFlags           *TCPFlags      // nil: any flags; only with TCP
	VLANs              []uint16       // outer 802.1Q VLAN id; sorted, deduplicated; untagged packets never match a list

	// The signature fields (signature.go, payload.go). Ranges are sorted
	// and merged like ports; DSCP and TOS exclude each other.
	Length []Range // IP packet length: IPv4 total length, IPv6 40 + payload length
	TTL    []Range // IPv4 TTL or IPv6 hop limit, 0 to 255
	DSCP   []Range // 0 to 63: the TOS byte or traffic class >> 2
	TOS    []Range // 0 to 255: the whole TOS byte or traffic class
	ICMP   *ICMP   // nil: any; only with protocol icmp or icmpv6
	// Payload is the transport payload bytes (payload.go); sorted by
	// offset, within one PayloadWindow-byte window.
	Payload []PayloadMatch

	// SrcCountries (ISO 3166-1 alpha-2, upper case) and SrcASNs constrain
	// the source to the networks the policy's geoip: databases give them;
	// sorted, deduplicated. SrcGeo is what they resolved to: the networks
	// of the countries, within those of the ASNs, within SrcCIDRs, for
	// those given (geoip.go, Sources). With either set and SrcGeo empty,
	// the rule matches no packet.
	SrcCountries []string
	SrcASNs      []uint32
	SrcGeo       []netip.Prefix
}

// Range is an inclusive range of ports, lengths, TTLs, DSCP or TOS values;
// a single value has Lo == Hi.
type Range struct{ Lo, Hi uint16 }

// PortRange is a range of ports.
type PortRange = Range

func (r Range) String() string {
	if r.Lo == r.Hi {
		return strconv.Itoa(int(r.Lo))
	}
	return fmt.Sprintf("%d-%d", r.Lo, r.Hi)
}

// TCP header flag bits, as they appear in byte 13 of the TCP header.
const (
	TCPFlagFIN uint8 = 0x01
	TCPFlagSYN uint8 = 0x02
	TCPFlagRST uint8 = 0x04
	TCPFlagPSH uint8 = 0x08
	TCPFlagACK uint8 = 0x10
	TCPFlagURG uint8 = 0x20
	TCPFlagECE uint8 = 0x40
	TCPFlagCWR uint8 = 0x80
)

// tcpFlagNames is in bit order, which is also the order String prints.
var tcpFlagNames = [8]string{"fin", "syn", "rst", "psh", "ack", "urg", "ece", "cwr"}

// TCPFlags matches a packet when every bit of Set is set and every bit of
// Clear is clear in its TCP flags byte; other bits do not matter. Set and
// Clear never share a bit.
type TCPFlags struct{ Set, Clear uint8 }

// Matches reports whether a TCP flags byte satisfies f.
func (f TCPFlags) Matches(flags uint8) bool {
	return flags&f.Set == f.Set && flags&f.Clear == 0
}

// String lists the required flags, then the forbidden ones with a "!", in
// the policy language's syntax: "syn,!ack".
func (f TCPFlags) String() string {
	var parts []string
	for i, name := range tcpFlagNames {
		if f.Set&(1<<i) != 0 {
			parts = append(parts, name)
		}
	}
	for i, name := range tcpFlagNames {
		if f.Clear&(1<<i) != 0 {
			parts = append(parts, "!"+name)
		}
	}
	return strings.Join(parts, ",")
}

// Level is one key and the limit applied per value of that key.
type Level struct {
	Key   Key
	Limit Limit
}

// Key says which packets share a bucket.
type Key struct {
	Kind KeyKind
	// IPv4Prefix (1..32) and IPv6Prefix (1..128) mask the source address
	// before it becomes part of the key. Both are 0 for KeyGlobal.
	IPv4Prefix, IPv6Prefix int
}

func (k Key) String() string {
	if k.Kind == KeyGlobal {
		return k.Kind.String()
	}
	return fmt.Sprintf("%s ipv4/%d ipv6/%d", k.Kind, k.IPv4Prefix, k.IPv6Prefix)
}

// Limit is a rate limit in packets or bytes.
//
// For TokenBucket, Count units are added per Per (the rate is the exact
// rational Count/Per) and the bucket holds at most Burst units; Window is 0.
// Per is a whole number of seconds: 1s whenever the rate is a whole number of
// units per second, otherwise the smallest multiple of the unit written that
// makes Count whole ("1M/h" is 1000000 per 1h, "1bit/s" is 1 byte per 8s).
//
// For FixedWindow, SlidingWindow and SlidingLog, at most Count units pass
// per Window (SlidingLog: packets only, Count at most 64); Per and Burst
// are 0.
type Limit struct {
	Algorithm Algorithm
	Unit      Unit
	Count     uint64
	Per       time.Duration
	Burst     uint64
	Window    time.Duration
	// Scope says who shares the limit: this host (the default) or every
	// host of the policy's fleet, through Redis.
	Scope Scope
}

// String renders the limit in normalised units: "token_bucket 1000 pkt/s
// burst 2000", "token_bucket 1000000 pkt per 1h burst 10",
// "sliding_window 10000000 B per 1s".
func (l Limit) String() string {
	u := l.Unit.short()
	if l.Algorithm == TokenBucket {
		rate := fmt.Sprintf("%d %s per %s", l.Count, u, formatDuration(l.Per))
		if l.Per == time.Second {
			rate = fmt.Sprintf("%d %s/s", l.Count, u)
		}
		return fmt.Sprintf("%s %s burst %d%s", l.Algorithm, rate, l.Burst, l.Scope.suffix())
	}
	return fmt.Sprintf("%s %d %s per %s%s", l.Algorithm, l.Count, u, formatDuration(l.Window), l.Scope.suffix())
}

// formatDuration writes round durations the way a policy would: "1h" rather
// than time.Duration's "1h0m0s".
func formatDuration(d time.Duration) string {
	for _, u := range []struct {
		d    time.Duration
		unit string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}} {
		if d > 0 && d%u.d == 0 {
			return strconv.FormatInt(int64(d/u.d), 10) + u.unit
		}
	}
	return d.String()
}

// Mode applies to the whole policy. The zero Mode is ModeEnforce.
type Mode uint8

const (
	ModeEnforce Mode = iota // over-limit packets get their rule's action
	ModeShadow              // dry run: nothing is dropped, not even deny; would-drops are counted
)

var modeNames = []string{"enforce", "shadow"}

func (m Mode) String() string { return enumString(int(m), modeNames) }

// Action is what happens to a packet over a limit. The zero Action is ActionDrop.
type Action uint8

const (
	ActionDrop   Action = iota // drop and count
	ActionShadow               // count as a would-drop and let it pass
	ActionBan                  // drop, and ban the source prefix for Rule.Ban.For
	// ActionSynCookie answers a TCP SYN over the limit with a SYN-ACK
	// carrying a SYN cookie, from the datapath, instead of dropping it:
	// only a client that receives the answer and completes the handshake
	// reaches the host. Only on rules that match SYNs alone.
	ActionSynCookie
	// ActionReject answers a packet over the limit, from the datapath,
	// with a TCP reset (TCP) or an ICMP destination unreachable,
	// administratively prohibited (any other protocol), within the
	// policy's Reject budget and one a second per source, and drops it.
	ActionReject
)

var actionNames = []string{"drop", "shadow", "ban", "syncookie", "reject"}

func (a Action) String() string { return enumString(int(a), actionNames) }

// Protocol is an IP protocol number, or ProtoAny.
type Protocol int

const (
	ProtoAny    Protocol = -1
	ProtoICMP   Protocol = 1
	ProtoTCP    Protocol = 6
	ProtoUDP    Protocol = 17
	ProtoICMPv6 Protocol = 58
)

var protocolNames = map[Protocol]string{
	ProtoAny: "any", ProtoICMP: "icmp", ProtoTCP: "tcp", ProtoUDP: "udp", ProtoICMPv6: "icmpv6",
}

func (p Protocol) String() string {
	if s, ok := protocolNames[p]; ok {
		return s
	}
	return fmt.Sprintf("Protocol(%d)", int(p))
}

// hasPorts reports whether packets of p carry ports a rule can match or key on.
func (p Protocol) hasPorts() bool { return p == ProtoTCP || p == ProtoUDP }

// KeyKind says what a bucket is per. The zero KeyKind is KeySrcIP.
type KeyKind uint8

const (
	KeySrcIP        KeyKind = iota // per source address, masked to the key's prefix
	KeySrcIPDstPort                // per masked source address and destination port
	KeySrcIPSrcPort                // per masked source address and source port (reflection floods)
	KeyGlobal                      // one bucket for everything the rule matches
)

var keyKindNames = []string{"src_ip", "src_ip+dst_port", "src_ip+src_port", "global"}

// hasPort says whether the key includes a port, and so needs a protocol
// with ports.
func (k KeyKind) hasPort() bool { return k == KeySrcIPDstPort || k == KeySrcIPSrcPort }

func (k KeyKind) String() string { return enumString(int(k), keyKindNames) }

// Algorithm is a rate limiting algorithm. The zero Algorithm is TokenBucket.
type Algorithm uint8

const (
	TokenBucket   Algorithm = iota // refills at a rate, holds at most a burst
	FixedWindow                    // at most Count per window, the counter resets at each window start
	SlidingWindow                  // at most Count in any window-long interval (as the datapath approximates it)
	SlidingLog                     // at most Count (1..64 packets) in any window-long interval, exactly
)

var algorithmNames = []string{"token_bucket", "fixed_window", "sliding_window", "sliding_log"}

// leakyBucket is accepted for TokenBucket: the datapath's token bucket is a
// GCRA meter, which is the leaky bucket as a meter (the same admissions).
const leakyBucket = "leaky_bucket"

func (a Algorithm) String() string { return enumString(int(a), algorithmNames) }

// Unit is what a limit counts. The zero Unit is Packets.
type Unit uint8

const (
	Packets Unit = iota
	Bytes
)

func (u Unit) String() string { return enumString(int(u), []string{"packets", "bytes"}) }

func (u Unit) short() string { return enumString(int(u), []string{"pkt", "B"}) }

// enumString names enum value v. The name lists are in the order of the
// constants, and the parser reads names with the same lists. Out of range
// values (only reachable by converting an arbitrary integer) print as their
// number.
func enumString(v int, names []string) string {
	if v >= 0 && v < len(names) {
		return names[v]
	}
	return "invalid(" + strconv.Itoa(v) + ")"
}
