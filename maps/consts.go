// SPDX-License-Identifier: Apache-2.0

// Package maps is the typed face of the limiter's BPF maps: it loads the
// program, writes a compiled policy (an Image, built by package compiler)
// as a new generation, and reads the counters back. Nothing outside this
// package reads or writes the maps.
package maps

import (
	"fmt"
	"strings"

	"github.com/xdplimit/xdplimit/gen"
)

// Constants come from bpf/xdplimit_consts.h through bpf2go; these are the
// Go names the rest of the package uses.
const (
	LayoutVersion = uint32(gen.XdplimitXdplConstXDPL_LAYOUT_VERSION)
	MaxRules      = int(gen.XdplimitXdplConstXDPL_MAX_RULES)
	MaxLevels     = int(gen.XdplimitXdplConstXDPL_MAX_LEVELS)
	CounterSlots  = int(gen.XdplimitXdplConstXDPL_COUNTER_SLOTS)
	globalSlots   = int(gen.XdplimitXdplConstXDPL_GLOBAL_SLOTS)
	NameLen       = int(gen.XdplimitXdplConstXDPL_NAME_LEN)

	portIdxNone   = uint32(gen.XdplimitXdplConstXDPL_PORT_IDX_NONE)
	vlanUntagged  = uint32(gen.XdplimitXdplConstXDPL_VLAN_IDX_UNTAGGED)
	gfShadow      = uint32(gen.XdplimitXdplConstXDPL_GF_SHADOW)
	gfACL         = uint32(gen.XdplimitXdplConstXDPL_GF_ACL)
	gfBans        = uint32(gen.XdplimitXdplConstXDPL_GF_BANS)
	rfBan         = uint8(gen.XdplimitXdplConstXDPL_RF_BAN)
	gfACLExact    = uint32(gen.XdplimitXdplConstXDPL_GF_ACL_EXACT)
	gfACLPrefix   = uint32(gen.XdplimitXdplConstXDPL_GF_ACL_PREFIX)
	gfFleetWin    = uint32(gen.XdplimitXdplConstXDPL_GF_FLEET_WINDOWS)
	gfNoSrcFlows  = uint32(gen.XdplimitXdplConstXDPL_GF_NO_SOURCE_FLOWS)
	gfSynCookie   = uint32(gen.XdplimitXdplConstXDPL_GF_SYNCOOKIE)
	gfTraffic     = uint32(gen.XdplimitXdplConstXDPL_GF_TRAFFIC)
	rfSynCookie   = uint8(gen.XdplimitXdplConstXDPL_RF_SYNCOOKIE)
	rfReject      = uint8(gen.XdplimitXdplConstXDPL_RF_REJECT)
	lfBytes       = uint8(gen.XdplimitXdplConstXDPL_LF_BYTES)
	lfFineClock   = uint8(gen.XdplimitXdplConstXDPL_LF_FINE_CLOCK)
	lfTrackFirst  = uint8(gen.XdplimitXdplConstXDPL_LF_TRACK_FIRST)
	rfShadow      = uint8(gen.XdplimitXdplConstXDPL_RF_SHADOW)
	aclAllow      = uint32(gen.XdplimitXdplConstXDPL_ACL_ALLOW)
	aclDeny       = uint32(gen.XdplimitXdplConstXDPL_ACL_DENY)
	nVerdicts     = int(gen.XdplimitXdplConstXDPL_NVERDICTS)
	nCounters     = int(gen.XdplimitXdplConstXDPL_NCOUNTERS)
	ruleBitmapLen = int(gen.XdplimitXdplConstXDPL_BITMAP_WORDS)
)

// The shape of an Image: which dimensions a policy uses (Image.Dims), the
// slots of each array dimension, and the key kinds of a level. The policy
// compiler builds Images from these; the datapath reads them.
const (
	ProtoSlots     = uint32(gen.XdplimitXdplConstXDPL_PROTO_SLOTS)
	PortSlots      = uint32(gen.XdplimitXdplConstXDPL_PORT_SLOTS)
	PortIdxFrag    = uint32(gen.XdplimitXdplConstXDPL_PORT_IDX_FRAG)
	TCPFlagSlots   = uint32(gen.XdplimitXdplConstXDPL_TCPF_SLOTS)
	TCPFlagIdxNone = uint32(gen.XdplimitXdplConstXDPL_TCPF_IDX_NONE)
	TCPFlagIdxFrag = uint32(gen.XdplimitXdplConstXDPL_TCPF_IDX_FRAG)
	VLANSlots      = uint32(gen.XdplimitXdplConstXDPL_VLAN_SLOTS)
	DimProto       = uint32(gen.XdplimitXdplConstXDPL_DIM_PROTO)
	DimDport       = uint32(gen.XdplimitXdplConstXDPL_DIM_DPORT)
	DimSport       = uint32(gen.XdplimitXdplConstXDPL_DIM_SPORT)
	DimSrc         = uint32(gen.XdplimitXdplConstXDPL_DIM_SRC)
	DimDst         = uint32(gen.XdplimitXdplConstXDPL_DIM_DST)
	DimTCPFlags    = uint32(gen.XdplimitXdplConstXDPL_DIM_TCPF)
	DimVLAN        = uint32(gen.XdplimitXdplConstXDPL_DIM_VLAN)
	KeySrc         = uint8(gen.XdplimitXdplConstXDPL_KEY_SRC)
	KeySrcDport    = uint8(gen.XdplimitXdplConstXDPL_KEY_SRC_DPORT)
	KeyGlobal      = uint8(gen.XdplimitXdplConstXDPL_KEY_GLOBAL)
	KeySrcSport    = uint8(gen.XdplimitXdplConstXDPL_KEY_SRC_SPORT)

	// The signature match fields: IP length, TTL, TOS and ICMP type and
	// code, each an array dimension indexed by the field's value.
	LenSlots    = uint32(gen.XdplimitXdplConstXDPL_LEN_SLOTS)
	TTLSlots    = uint32(gen.XdplimitXdplConstXDPL_TTL_SLOTS)
	TOSSlots    = uint32(gen.XdplimitXdplConstXDPL_TOS_SLOTS)
	ICMPSlots   = uint32(gen.XdplimitXdplConstXDPL_ICMP_SLOTS)
	ICMPIdxNone = uint32(gen.XdplimitXdplConstXDPL_ICMP_IDX_NONE)
	ICMPIdxFrag = uint32(gen.XdplimitXdplConstXDPL_ICMP_IDX_FRAG)
	DimLen      = uint32(gen.XdplimitXdplConstXDPL_DIM_LEN)
	DimTTL      = uint32(gen.XdplimitXdplConstXDPL_DIM_TTL)
	DimTOS      = uint32(gen.XdplimitXdplConstXDPL_DIM_TOS)
	DimICMPType = uint32(gen.XdplimitXdplConstXDPL_DIM_ICMPT)
	DimICMPCode = uint32(gen.XdplimitXdplConstXDPL_DIM_ICMPC)

	// Payload matches (bpf/classify_payload.h): a rule's bytes lie in one
	// window of PayloadWindow bytes, and a generation's rules use at most
	// PayloadShapes distinct windows.
	DimPayload    = uint32(gen.XdplimitXdplConstXDPL_DIM_PAYLOAD)
	PayloadWindow = int(gen.XdplimitXdplConstXDPL_PAYLOAD_WINDOW)
	PayloadShapes = int(gen.XdplimitXdplConstXDPL_PAYLOAD_SHAPES)
)

// Verdict indexes per-rule counters.
type Verdict int

const (
	VerdictPass   = Verdict(gen.XdplimitXdplConstXDPL_V_PASS)
	VerdictDrop   = Verdict(gen.XdplimitXdplConstXDPL_V_DROP)
	VerdictShadow = Verdict(gen.XdplimitXdplConstXDPL_V_SHADOW)
	// VerdictCookie: a SYN over the limit of a rule with action syncookie,
	// answered with a SYN-ACK carrying a SYN cookie; it went no further.
	VerdictCookie = Verdict(gen.XdplimitXdplConstXDPL_V_COOKIE)
	// VerdictReject: a packet over the limit of a rule with action
	// reject, answered with a TCP reset or an ICMP error; it went no
	// further. One the rule could not answer is a VerdictDrop.
	VerdictReject = Verdict(gen.XdplimitXdplConstXDPL_V_REJECT)
)

// NumVerdicts is the number of verdicts: the size of a rule's counters.
const NumVerdicts = nVerdicts

// Verdicts lists every verdict, in counter order.
var Verdicts = []Verdict{VerdictPass, VerdictDrop, VerdictShadow, VerdictCookie, VerdictReject}

func (v Verdict) String() string {
	switch v {
	case VerdictPass:
		return "pass"
	case VerdictDrop:
		return "drop"
	case VerdictShadow:
		return "shadow_drop"
	case VerdictCookie:
		return "syncookie"
	case VerdictReject:
		return "reject"
	}
	return fmt.Sprintf("verdict(%d)", int(v))
}

// Counter indexes the global per-CPU counters.
type Counter int

const (
	CounterAllow        = Counter(gen.XdplimitXdplConstXDPL_C_ALLOW)
	CounterDeny         = Counter(gen.XdplimitXdplConstXDPL_C_DENY)
	CounterDenyShadow   = Counter(gen.XdplimitXdplConstXDPL_C_DENY_SHADOW)
	CounterUnmatched    = Counter(gen.XdplimitXdplConstXDPL_C_UNMATCHED)
	CounterMalformed    = Counter(gen.XdplimitXdplConstXDPL_C_MALFORMED)
	CounterNonIP        = Counter(gen.XdplimitXdplConstXDPL_C_NON_IP)
	CounterNewSource    = Counter(gen.XdplimitXdplConstXDPL_C_NEW_SOURCE)
	CounterInsertFail   = Counter(gen.XdplimitXdplConstXDPL_C_INSERT_FAIL)
	CounterCASExhausted = Counter(gen.XdplimitXdplConstXDPL_C_CAS_EXHAUSTED)
	// CounterUntracked: packets admitted at a per-source level without
	// being charged to a state entry, because the sketch had not seen their
	// key often enough in its current epoch (see docs/design.md).
	CounterUntracked = Counter(gen.XdplimitXdplConstXDPL_C_UNTRACKED)
	// CounterFleetLost counts fleet keys the datapath could not report (its
	// ring was full): their consumption is synced at their next report.
	CounterFleetLost = Counter(gen.XdplimitXdplConstXDPL_C_FLEET_LOST)
	// Bans (see bans.go): packets dropped, or passed in shadow, because
	// their source is banned; bans rules started; live bans replaced
	// because their set of the table was full.
	CounterBanDrop     = Counter(gen.XdplimitXdplConstXDPL_C_BAN_DROP)
	CounterBanShadow   = Counter(gen.XdplimitXdplConstXDPL_C_BAN_SHADOW)
	CounterBanStarted  = Counter(gen.XdplimitXdplConstXDPL_C_BAN_STARTED)
	CounterBanReplaced = Counter(gen.XdplimitXdplConstXDPL_C_BAN_REPLACED)
	// CounterRefusedCached counts packets refused from the per-CPU
	// refused-until cache (bpf/refused.h) without a state lookup.
	CounterRefusedCached = Counter(gen.XdplimitXdplConstXDPL_C_REFUSED_CACHED)
	// CounterFlowCached counts packets refused from the per-CPU flow
	// cache (bpf/flows.h) before the lists, the bans and the classifier.
	CounterFlowCached = Counter(gen.XdplimitXdplConstXDPL_C_FLOW_CACHED)
	// SYN cookies (bpf/syncookie.h): SYNs a cookie rule refused but passed
	// to the stack so that its listeners keep accepting cookie ACKs (one a
	// second per destination); SYNs refused that could not be answered
	// (SYN+FIN or RST, a fragment, a shape the answer does not follow),
	// dropped; ACKs to a listener whose cookie was valid (passed on) or
	// not (dropped).
	CounterCookieKeepalive  = Counter(gen.XdplimitXdplConstXDPL_C_COOKIE_KEEPALIVE)
	CounterCookieUnanswered = Counter(gen.XdplimitXdplConstXDPL_C_COOKIE_UNANSWERED)
	CounterCookieACKValid   = Counter(gen.XdplimitXdplConstXDPL_C_COOKIE_ACK_VALID)
	CounterCookieACKInvalid = Counter(gen.XdplimitXdplConstXDPL_C_COOKIE_ACK_INVALID)
	// Rejects (bpf/reject.h): packets a reject rule refused and dropped
	// without an answer, by why: the global budget was spent; the source
	// had an answer within the second; no answer may be sent (an address
	// that is not one host's, a link-layer group address, an ICMP error, a
	// reset, a non-first fragment); none could be built (a shape the
	// answer does not follow, too short to quote).
	CounterRejectBudget     = Counter(gen.XdplimitXdplConstXDPL_C_REJECT_BUDGET)
	CounterRejectSource     = Counter(gen.XdplimitXdplConstXDPL_C_REJECT_SOURCE)
	CounterRejectNever      = Counter(gen.XdplimitXdplConstXDPL_C_REJECT_NEVER)
	CounterRejectUnanswered = Counter(gen.XdplimitXdplConstXDPL_C_REJECT_UNANSWERED)
	// Conversation checks (bpf/conversation.h): TCP segments without SYN
	// to this host that no socket owns, and UDP datagrams to a port
	// without a socket, dropped or (in shadow) passed; and the packets
	// looked up against the sockets, by a check armed or watching.
	CounterNoConnection       = Counter(gen.XdplimitXdplConstXDPL_C_NO_CONNECTION)
	CounterNoConnectionShadow = Counter(gen.XdplimitXdplConstXDPL_C_NO_CONNECTION_SHADOW)
	CounterNoSocket           = Counter(gen.XdplimitXdplConstXDPL_C_NO_SOCKET)
	CounterNoSocketShadow     = Counter(gen.XdplimitXdplConstXDPL_C_NO_SOCKET_SHADOW)
	CounterConvLookups        = Counter(gen.XdplimitXdplConstXDPL_C_CONV_LOOKUPS)
	// The reflection guard: datagrams from a reflector's port that
	// answer no request this host sent, dropped or (in shadow) passed;
	// and the requests the egress program recorded.
	CounterNoRequest       = Counter(gen.XdplimitXdplConstXDPL_C_NO_REQUEST)
	CounterNoRequestShadow = Counter(gen.XdplimitXdplConstXDPL_C_NO_REQUEST_SHADOW)
	CounterRequests        = Counter(gen.XdplimitXdplConstXDPL_C_REQUESTS)
)

// RejectReasons lists the counters of the packets reject rules dropped
// unanswered, one per reason.
var RejectReasons = []Counter{CounterRejectBudget, CounterRejectSource, CounterRejectNever, CounterRejectUnanswered}

// RejectReason names one of RejectReasons: budget, source, never or
// unanswered.
func RejectReason(c Counter) string { return strings.TrimPrefix(c.String(), "reject_") }

var counterNames = map[Counter]string{
	CounterAllow:         "allow",
	CounterDeny:          "deny",
	CounterDenyShadow:    "deny_shadow",
	CounterUnmatched:     "unmatched",
	CounterMalformed:     "malformed",
	CounterNonIP:         "non_ip",
	CounterNewSource:     "new_source",
	CounterInsertFail:    "insert_failure",
	CounterCASExhausted:  "cas_exhausted",
	CounterUntracked:     "untracked",
	CounterFleetLost:     "fleet_key_lost",
	CounterBanDrop:       "ban_drop",
	CounterBanShadow:     "ban_shadow",
	CounterBanStarted:    "ban_started",
	CounterBanReplaced:   "ban_replaced",
	CounterRefusedCached: "refused_cached",
	CounterFlowCached:    "flow_cached",

	CounterCookieKeepalive:  "syncookie_keepalive",
	CounterCookieUnanswered: "syncookie_unanswered",
	CounterCookieACKValid:   "syncookie_ack_valid",
	CounterCookieACKInvalid: "syncookie_ack_invalid",

	CounterRejectBudget:     "reject_budget",
	CounterRejectSource:     "reject_source",
	CounterRejectNever:      "reject_never",
	CounterRejectUnanswered: "reject_unanswered",

	CounterNoConnection:       "no_connection",
	CounterNoConnectionShadow: "no_connection_shadow",
	CounterNoSocket:           "no_socket",
	CounterNoSocketShadow:     "no_socket_shadow",
	CounterConvLookups:        "conversation_lookups",
	CounterNoRequest:          "no_request",
	CounterNoRequestShadow:    "no_request_shadow",
	CounterRequests:           "requests_recorded",
}

func (c Counter) String() string {
	if n, ok := counterNames[c]; ok {
		return n
	}
	return fmt.Sprintf("counter(%d)", int(c))
}

// Clock selects the datapath's time source (a load-time constant).
type Clock uint32

const (
	ClockKtime  = Clock(gen.XdplimitXdplConstXDPL_CLOCK_KTIME)
	ClockCoarse = Clock(gen.XdplimitXdplConstXDPL_CLOCK_COARSE)
	// ClockMap reads time from a map the caller sets: tests and replay.
	ClockMap = Clock(gen.XdplimitXdplConstXDPL_CLOCK_MAP)
)

func (c Clock) String() string {
	switch c {
	case ClockKtime:
		return "ktime"
	case ClockCoarse:
		return "coarse"
	case ClockMap:
		return "injected"
	}
	return fmt.Sprintf("clock(%d)", uint32(c))
}
