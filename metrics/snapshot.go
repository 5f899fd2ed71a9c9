// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"fmt"
	"strings"
	"time"

	"github.com/xdplimit/xdplimit/banfeed"
	"github.com/xdplimit/xdplimit/maps"
)

// Rule label values for the traffic no policy rule decides. Policy rule names
// match [a-z0-9][a-z0-9_-]*, so a leading underscore can never clash.
const (
	RuleAllow     = "_allow"      // the allow list: passed without limiting
	RuleDeny      = maps.ListDeny // the deny list: dropped (shadow_drop in shadow mode)
	RuleUnmatched = "_unmatched"  // IP traffic no rule matched: passed
	RuleMalformed = "_malformed"  // frames the parser could not judge: the policy's unparsed action
	RuleNonIP     = "_non_ip"     // neither IPv4 nor IPv6 (ARP, LLDP, ...): passed
	RuleBan       = maps.ListBan  // banned sources: dropped (shadow_drop for shadow bans)
	// The conversation checks: TCP to this host that no socket owns, UDP
	// to a port without a socket: dropped (shadow_drop in shadow).
	RuleNoConnection = maps.ListNoConnection
	RuleNoSocket     = maps.ListNoSocket
	RuleNoRequest    = maps.ListNoRequest // the reflection guard
)

// Snapshot is one reading of an interface's counters. Reading it costs a
// fixed number of map lookups (a few per rule in force); it never walks the
// source table.
type Snapshot struct {
	Interface string
	Time      time.Time
	Meta      maps.Meta
	Rules     []maps.RuleStat // the rules in force, in policy order
	Counters  map[maps.Counter]maps.CounterValue
	Unparsed  []maps.UnparsedValue // by maps.UnparsedKind
	Capacity  uint32               // entries of the source table
	Bans      []maps.Ban           // the bans in force (a walk of the ban table)
	// LogsCapacity is the sliding_log table's size (maps.UnusedLogs when
	// the policy it was attached with had no sliding_log level), and
	// LogsCreated the logs created in it.
	LogsCapacity uint32
	LogsCreated  uint64
	BansCapacity uint32
	// Conversations is the conversation checks in force, Armed those that
	// judge every packet now.
	Conversations maps.Conversations
	Armed         []maps.Check
}

// Read takes a snapshot of the limiter l serving iface.
func Read(iface string, l *maps.Limiter) (Snapshot, error) {
	s := Snapshot{Interface: iface, Capacity: l.SourcesCapacity(), LogsCapacity: l.LogsCapacity(), BansCapacity: l.BansCapacity()}
	var err error
	if s.Meta, err = l.Meta(); err != nil {
		return s, fmt.Errorf("%s: reading the metadata map: %w", iface, err)
	}
	if s.Counters, err = l.Counters(); err != nil {
		return s, fmt.Errorf("%s: %w", iface, err)
	}
	if s.Unparsed, err = l.UnparsedCounters(); err != nil {
		return s, fmt.Errorf("%s: %w", iface, err)
	}
	if s.Rules, err = l.RuleStats(); err != nil {
		return s, fmt.Errorf("%s: reading the rule counters: %w", iface, err)
	}
	if s.Bans, err = l.Bans(); err != nil {
		return s, fmt.Errorf("%s: reading the ban table: %w", iface, err)
	}
	if s.LogsCreated, err = l.LogsCreated(); err != nil {
		return s, fmt.Errorf("%s: %w", iface, err)
	}
	if s.Conversations, err = l.ConversationsInForce(); err != nil {
		return s, fmt.Errorf("%s: %w", iface, err)
	}
	if s.Armed, err = l.ConvArmed(); err != nil {
		return s, fmt.Errorf("%s: reading the armed checks: %w", iface, err)
	}
	s.Time = time.Now()
	return s, nil
}

// Series is one (rule, verdict) pair of xdplimit_packets_total and
// xdplimit_bytes_total.
type Series struct {
	Rule    string
	Verdict maps.Verdict
	Value   maps.CounterValue
}

// Series lists every (rule, verdict) counter of the snapshot: the
// verdicts of each rule in force, in policy order (syncookie and reject
// only for rules with that action), then the reserved rules.
func (s Snapshot) Series() []Series {
	out := make([]Series, 0, 3*len(s.Rules)+6)
	for _, r := range s.Rules {
		for _, v := range maps.Verdicts {
			if (v != maps.VerdictCookie || r.SynCookie) && (v != maps.VerdictReject || r.Reject) {
				out = append(out, Series{r.Name, v, r.Verdicts[v]})
			}
		}
	}
	c := s.Counters
	// Unparsed frames are all counted as malformed; those the policy's
	// unparsed action or limit dropped are split out.
	var drop maps.CounterValue
	for _, u := range s.Unparsed {
		drop.Packets += u.Dropped
		drop.Bytes += u.DroppedBytes
	}
	malformed := c[maps.CounterMalformed]
	malformed.Packets -= min(drop.Packets, malformed.Packets)
	malformed.Bytes -= min(drop.Bytes, malformed.Bytes)
	return append(out,
		Series{RuleAllow, maps.VerdictPass, c[maps.CounterAllow]},
		Series{RuleDeny, maps.VerdictDrop, c[maps.CounterDeny]},
		Series{RuleDeny, maps.VerdictShadow, c[maps.CounterDenyShadow]},
		Series{RuleUnmatched, maps.VerdictPass, c[maps.CounterUnmatched]},
		Series{RuleMalformed, maps.VerdictPass, malformed},
		Series{RuleMalformed, maps.VerdictDrop, drop},
		Series{RuleNonIP, maps.VerdictPass, c[maps.CounterNonIP]},
		Series{RuleBan, maps.VerdictDrop, c[maps.CounterBanDrop]},
		Series{RuleBan, maps.VerdictShadow, c[maps.CounterBanShadow]},
		Series{RuleNoConnection, maps.VerdictDrop, c[maps.CounterNoConnection]},
		Series{RuleNoConnection, maps.VerdictShadow, c[maps.CounterNoConnectionShadow]},
		Series{RuleNoSocket, maps.VerdictDrop, c[maps.CounterNoSocket]},
		Series{RuleNoSocket, maps.VerdictShadow, c[maps.CounterNoSocketShadow]},
		Series{RuleNoRequest, maps.VerdictDrop, c[maps.CounterNoRequest]},
		Series{RuleNoRequest, maps.VerdictShadow, c[maps.CounterNoRequestShadow]},
	)
}

// BansByOrigin counts the bans in force by origin (banfeed.Origin: a
// rule's name, a feed's source, or maps.OriginManual).
func (s Snapshot) BansByOrigin() map[string]int {
	out := map[string]int{}
	for _, b := range s.Bans {
		out[banfeed.Origin(b)]++
	}
	return out
}

// BansStarted is the bans ever started, by rules (shadow ones included)
// and by hand; BansEnded those that ended since (expired, unbanned,
// replaced, or renewed by a new ban of the same prefix): started minus
// those in force, so it never runs ahead of what the table holds.
func (s Snapshot) BansStarted() (byRules, manual uint64) {
	return s.Counters[maps.CounterBanStarted].Packets, s.Meta.ManualBans
}

func (s Snapshot) BansEnded() uint64 {
	r, m := s.BansStarted()
	return r + m - min(uint64(len(s.Bans)), r+m)
}

// Inserts is the number of entries the datapath created in the source table
// since its maps were created (one per new source and limiter level; an
// adopting attach keeps the count).
func (s Snapshot) Inserts() uint64 { return s.Counters[maps.CounterNewSource].Packets }

// TrackedSources estimates the entries in the source table without walking
// it: min(inserts, capacity). Nothing deletes entries but LRU eviction, so
// this is exact until the table first fills, and an upper bound after that:
// the kernel's LRU can evict slightly before the table is full (entries
// parked on other CPUs' free lists).
func (s Snapshot) TrackedSources() uint64 { return min(s.Inserts(), uint64(s.Capacity)) }

// Table is one of the limiter's large tables: its size in entries (0 when
// it is not allocated) and the entries in use (estimated for the LRU
// tables, as TrackedSources).
type Table struct {
	Name              string
	Capacity, Entries uint64
}

// Tables are the limiter's large tables: the state tables (both
// together), the sliding_log table and the ban table.
func (s Snapshot) Tables() []Table {
	logs := Table{Name: "sliding_log"}
	if s.LogsCapacity > maps.UnusedLogs {
		logs.Capacity = uint64(s.LogsCapacity)
		logs.Entries = min(s.LogsCreated, logs.Capacity)
	}
	return []Table{
		{Name: "state", Capacity: uint64(s.Capacity), Entries: s.TrackedSources()},
		logs,
		{Name: "bans", Capacity: uint64(s.BansCapacity), Entries: uint64(len(s.Bans))},
	}
}

// Evictions estimates the entries LRU eviction has pushed out:
// max(0, inserts - capacity), a lower bound for the same reason.
func (s Snapshot) Evictions() uint64 {
	if n := s.Inserts(); n > uint64(s.Capacity) {
		return n - uint64(s.Capacity)
	}
	return 0
}

// conversationsLine says how each conversation check in force runs now,
// "tcp always, udp under_attack (armed)", or "" when every one is off.
func (s Snapshot) conversationsLine() string {
	var parts []string
	for _, c := range maps.AllChecks {
		cc := s.Conversations.Of(c)
		if !cc.On {
			continue
		}
		p := c.String() + " " + cc.When()
		if !cc.Always && s.Conversations.JudgesAll(c, s.Armed) {
			p += " (armed)"
		}
		if cc.Shadow {
			p += " (shadow)"
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, ", ")
}
