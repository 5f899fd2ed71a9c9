// SPDX-License-Identifier: Apache-2.0

// What a replay reports: packet counts per rule and per outcome, the bans
// rules started, the sources with the most drops and the frames explained.
// Rendering them is report.go's and report_json.go's job.

package replay

import (
	"net/netip"
	"time"

	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/policy"
)

// Counts is a number of packets and their bytes.
type Counts struct {
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

func (c *Counts) add(bytes int) {
	c.Packets++
	c.Bytes += uint64(bytes)
}

// RuleResult is what one rule did.
type RuleResult struct {
	Name               string
	Line               int
	Pass, Drop, Shadow Counts
	// Cookie counts the SYNs a rule with action syncookie would answer
	// with a SYN-ACK carrying a cookie (the program sends them with
	// XDP_TX; a replay sends nothing).
	Cookie Counts
	// Reject counts the packets a rule with action reject would answer
	// with a TCP reset or an ICMP error (sent with XDP_TX; a replay sends
	// nothing); those it would drop unanswered are in Drop.
	Reject Counts
	// Refused counts the packets each level refused (dropped,
	// shadow-dropped or answered with a cookie), in policy order: 0 is the
	// rule's own limit, i the aggregate level i-1.
	Refused []uint64
}

// SourceDrops is one source's dropped packets under one rule (or the deny
// list).
type SourceDrops struct {
	Source       netip.Addr
	Rule         string // a rule name, or "deny list"
	Drop, Shadow Counts
	Cookie       Counts // SYNs answered with a cookie
	Reject       Counts // packets answered by a reject rule
}

// BanEvent is a ban a rule started during the replay: at the frame that
// exceeded the rule, until Start + For (capture time), unless a later ban
// of the same prefix renewed it.
type BanEvent struct {
	Frame  int
	Start  time.Duration // capture time since the first frame
	For    time.Duration
	Prefix netip.Prefix
	Rule   string
	Shadow bool
}

// Explanation is what decided one frame.
type Explanation struct {
	Frame  int
	Offset time.Duration // capture time since the first frame
	Len    int           // bytes the program saw
	Packet string        // a one-line summary of the frame
	// Short: shorter than an Ethernet header; counted as malformed
	// without running the program, which refuses such input.
	Short bool
	// Outgoing: sent by the capturing host; not run.
	Outgoing bool
	Decision maps.Decision
	// Text says what decided the frame, from the decision and the policy.
	Text string
}

// Report is the result of a replay.
type Report struct {
	Policy  *policy.Policy
	Capture string // the capture's file name, for the heading
	// Frames is the number of frames replayed.
	Frames      int
	First, Last time.Time // capture timestamps of the first and last frame
	Rules       []RuleResult
	Allow       Counts
	Deny        Counts // dropped by the deny list; shadow-dropped in mode: shadow
	Unmatched   Counts
	Malformed   Counts // short frames included
	// MalformedDropped: the malformed frames the policy's unparsed action
	// or limit dropped (the rest passed).
	MalformedDropped Counts
	// Unparsed counts what the parser could not judge, by maps.UnparsedKind.
	Unparsed [maps.UnparsedKinds]Counts
	NonIP    Counts
	// Banned: frames of banned sources (dropped; shadow-dropped for a
	// shadow ban). Bans are the bans rules started, in capture order.
	Banned Counts
	Bans   []BanEvent
	// NoRequest: received answers of reflectors to no request the
	// captured host sent (the reflection guard's drops). RequestsRecorded:
	// the requests among the frames it sent. NotReplayed: the checks of
	// the policy the replay cannot run (tcp, udp: they ask the sockets).
	NoRequest        Counts
	RequestsRecorded uint64
	NotReplayed      []string
	Top              []SourceDrops
	Explained        []Explanation
	// Things about the capture that affect how the numbers read.
	Short     Counts // frames shorter than an Ethernet header (in Malformed too)
	Truncated int    // frames captured shorter than they were on the wire
	Cut       int    // frames longer than a test run takes, which the kernel cut
	Backwards int    // frames stamped earlier than the frame before them
	NoTime    int    // frames without a timestamp, run at the previous frame's time
	// NoLinkLayer: frames captured without an Ethernet header (Linux
	// cooked, raw IP), run behind a synthesised one.
	NoLinkLayer int
	// Outgoing: frames the capturing host sent, which an XDP program never
	// sees: counted (captured bytes, with an Ethernet header), not run.
	Outgoing Counts
	// CutOff: the capture ended inside a record; the report covers the
	// frames before it.
	CutOff     *CutOff
	MaxSources uint32
	TrackAfter uint32
	// Sources is what the limiter held for Options.Sources at the end of
	// the capture, on the capture's clock.
	Sources []maps.Source
}
