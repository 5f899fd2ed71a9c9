// SPDX-License-Identifier: Apache-2.0

// Package droplog writes the drops the datapath samples into its rings as
// JSON lines, for log pipelines (journald, fail2ban, CrowdSec, a SIEM). It
// reads the ring with its own cursor, so `xdplimit top` reads it at the same
// time; it caps the lines per second and never blocks on its output.
package droplog

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/xdplimit/xdplimit/maps"
)

// Line is one sampled drop as written: field names are the log's format
// (docs/logging.md), kept stable for the filters that parse it.
type Line struct {
	Event     string    `json:"event"` // "drop"
	Time      time.Time `json:"time"`  // when the reader took the sample, UTC
	Interface string    `json:"interface"`
	Rule      string    `json:"rule"` // the rule's name, _deny or _ban
	// Level is the refusing level in policy order: 0 the rule's own limit,
	// 1.. its aggregates in file order; absent for the deny list.
	Level *int `json:"level,omitempty"`
	// Action: drop, shadow (counted, passed), deny, ban, syncookie (a SYN
	// answered with a cookie), bad_cookie (an ACK with a wrong cookie,
	// dropped) or reject (answered with a reset or an ICMP error; one a
	// reject rule did not answer is a drop).
	Action string `json:"action"`
	Src    string `json:"src"`
	Dst    string `json:"dst"`
	Proto  string `json:"proto"` // tcp, udp, icmp, icmpv6, sctp, udplite, or the number
	// Ports are absent when the packet has none or they are unknown
	// (a non-first fragment).
	SrcPort *uint16 `json:"sport,omitempty"`
	DstPort *uint16 `json:"dport,omitempty"`
	Length  uint16  `json:"len"` // IP packet length
	TTL     uint8   `json:"ttl"` // IPv4 TTL or IPv6 hop limit
	TOS     uint8   `json:"tos"` // IPv4 TOS or IPv6 traffic class
}

// Summary is the line written after a second in which lines were
// suppressed: how many, and why.
type Summary struct {
	Event      string    `json:"event"` // "suppressed"
	Time       time.Time `json:"time"`
	Interface  string    `json:"interface"`
	Suppressed uint64    `json:"suppressed"`
	RateCap    uint64    `json:"rate_cap"` // over max_per_second
	Backlog    uint64    `json:"backlog"`  // the output fell behind
	Ring       uint64    `json:"ring"`     // samples the datapath overwrote before they were read
}

// lineOf turns a sample into its line.
func lineOf(s maps.DropSample, iface, rule string, at time.Time) Line {
	l := Line{Event: "drop", Time: at.UTC(), Interface: iface, Rule: rule, Action: action(s),
		Src: s.Source.String(), Dst: s.Destination.String(), Proto: protoName(s.Protocol, s.Source.Is6()),
		Length: s.IPLength, TTL: s.TTL, TOS: s.TOS}
	if s.Level >= 0 {
		lv := s.Level
		l.Level = &lv
	}
	if s.HasPorts {
		sp, dp := s.SrcPort, s.DstPort
		l.SrcPort, l.DstPort = &sp, &dp
	}
	return l
}

func action(s maps.DropSample) string {
	switch {
	case s.Verdict == maps.VerdictShadow:
		return "shadow"
	case s.Verdict == maps.VerdictCookie:
		return "syncookie"
	case s.Verdict == maps.VerdictReject:
		return "reject"
	case s.Level == maps.CookieACKLevel:
		return "bad_cookie"
	case s.Level == maps.NoConnectionLevel:
		return "no_connection"
	case s.Level == maps.NoSocketLevel:
		return "no_socket"
	case s.Level == maps.NoRequestLevel:
		return "no_request"
	case s.Deny:
		return "deny"
	case s.Ban:
		return "ban"
	}
	return "drop"
}

func protoName(p uint8, v6 bool) string {
	switch p {
	case 6:
		return "tcp"
	case 17:
		return "udp"
	case 1:
		return "icmp"
	case 58:
		if v6 {
			return "icmpv6"
		}
	case 132:
		return "sctp"
	case 136:
		return "udplite"
	}
	return strconv.Itoa(int(p))
}

// encode renders v as one line of JSON.
func encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // Line and Summary always marshal
	}
	return append(b, '\n')
}
