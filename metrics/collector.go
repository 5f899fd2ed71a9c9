// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"cmp"
	"encoding/hex"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xdplimit/xdplimit/maps"
)

const namespace = "xdplimit"

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, labels, nil)
}

// The collector's families. Every label is bounded: interfaces, rules in
// force (at most maps.MaxRules each), verdicts, levels. Nothing is labelled
// by source address.
var (
	packetsDesc = desc("packets_total",
		"Packets by interface, rule and verdict (pass, drop, shadow_drop; syncookie for a rule with that action: "+
			"the SYNs answered with a SYN-ACK carrying a cookie; reject for a rule with that action: the packets "+
			"answered with a TCP reset or an ICMP error, those it dropped unanswered being drops). Rules starting with an underscore are "+
			"not policy rules: _allow and _deny are the allow and deny lists, _unmatched is IP traffic no rule "+
			"matched, _malformed are frames the parser could not judge (the policy's unparsed action: pass or drop), "+
			"_non_ip (ARP, LLDP, ...) is passed.",
		"interface", "rule", "verdict")
	bytesDesc = desc("bytes_total",
		"Bytes (Ethernet frame length, without FCS) by interface, rule and verdict, as xdplimit_packets_total.",
		"interface", "rule", "verdict")
	levelDropsDesc = desc("level_drops_total",
		"Packets refused by each limiter level of a rule: level 0 is the rule's own limit, then its aggregate "+
			"levels in policy order. Includes refusals that shadow mode passed.",
		"interface", "rule", "level")
	trackedDesc = desc("tracked_sources",
		"Entries in the per-source state table (one per source and limiter level), estimated without walking "+
			"the table as min(xdplimit_source_inserts_total, capacity): exact until the table first fills, then "+
			"an upper bound (the kernel's LRU may evict slightly early).",
		"interface")
	capacityDesc = desc("source_table_capacity",
		"Size of the state tables (LRU hashes) in entries: IPv4 per-source keys (--max-sources) plus every other key (--max-other-sources).", "interface")
	tableCapacityDesc = desc("table_capacity",
		"Size in entries of each large table, fixed when it was created: state (both state tables, as "+
			"xdplimit_source_table_capacity), sliding_log (0 when the limiter was attached with a policy without "+
			"sliding_log levels, which does not allocate it) and bans.", "interface", "table")
	tableEntriesDesc = desc("table_entries",
		"Entries in use in each large table: for state and sliding_log, the entries created capped at the "+
			"capacity (exact until the table first fills, then an upper bound: only LRU eviction removes "+
			"entries); for bans, the bans in force.", "interface", "table")
	insertsDesc = desc("source_inserts_total",
		"Entries the datapath created in the source table (new sources, per limiter level) since its maps were created.",
		"interface")
	evictionsDesc = desc("source_table_evictions_total",
		"Entries pushed out of the full source table by LRU eviction, estimated as "+
			"max(0, xdplimit_source_inserts_total - capacity): a lower bound. A rising rate means sources are "+
			"forgotten (and get a fresh burst) before their limit would have refilled: enlarge --max-sources.",
		"interface")
	insertFailDesc = desc("source_table_insert_failures_total",
		"Packets refused because the source table could not take their entry (dropped: the limiter fails closed).",
		"interface")
	contendedDesc = desc("contended_updates_total",
		"Packets refused after every compare-and-swap attempt on their state entry lost to other CPUs.",
		"interface")
	cachedDesc = desc("cached_refusals_total",
		"Packets refused from a per-CPU cache, without reading their limiter state: cache=\"flow\" right after "+
			"parsing (a flow its rule refused before), cache=\"refused\" at the refusing level. They are also "+
			"counted as drops of their rule and level.",
		"interface", "cache")
	untrackedDesc = desc("untracked_packets_total",
		"Packets admitted at a per-source level without being charged to a state entry: the admission sketch had not "+
			"seen their key often enough in its current epoch to spend a table lookup or insert on it (spoofed one-packet "+
			"sources; a tracked source's first packet after a pause of over ~0.3 s). Aggregate levels still apply.",
		"interface")
	unparsedDesc = desc("unparsed_packets_total",
		"Frames the parser could not judge, by kind: truncated, bad_length, bad_header, bad_checksum (IPv4 header), "+
			"too_many_vlan_tags (all of them frames the Linux stack drops, or more than 1024 tags; the "+
			"policy's unparsed action applies), and too_many_headers (IPv6 extension-header chains longer than the "+
			"parser's bound, which the rules judge by source as fragments).",
		"interface", "kind")
	unparsedDropDesc = desc("unparsed_dropped_packets_total",
		"Unparsed frames dropped by the policy's unparsed action or limit, by kind.", "interface", "kind")
	policyInfoDesc = desc("policy_info",
		"The policy in force: its file's SHA-256 (1 per interface).", "interface", "sha256")
	programInfoDesc = desc("program_info",
		"The XDP program enforcing on the interface: attach mode (native, generic) and kernel program id.",
		"interface", "mode", "prog_id")
	attachTimeDesc = desc("attach_time_seconds",
		"Unix time the limiter's maps were created on the interface (an adopting attach keeps it): the start of "+
			"every counter.", "interface")
	bansActiveDesc = desc("bans_active",
		"Bans in force, by origin: the banning rule's name, crowdsec or fleet (a feed's), or manual (xdplimit ban). "+
			"Read by walking the ban table.",
		"interface", "origin")
	bansStartedDesc = desc("bans_started_total",
		"Bans started since the maps were created, by kind: rule (action ban, shadow included) or manual (xdplimit ban "+
			"and the feeds' bans).",
		"interface", "kind")
	bansEndedDesc = desc("bans_ended_total",
		"Bans that ended (expired, unbanned, replaced, or renewed by a new ban of the same prefix): bans started "+
			"minus bans in force.", "interface")
	bansReplacedDesc = desc("bans_replaced_total",
		"Bans in force that a rule's new ban replaced because their set of the ban table was full (the one ending "+
			"first goes): a rising rate means --max-bans is too small.", "interface")
	upDesc = desc("up", upHelp, "interface")

	cookieACKsDesc = desc("syncookie_acks_total",
		"TCP ACKs to a listener checked against the SYN cookies of a rule with action syncookie, "+
			"by result: valid (passed on) or invalid (dropped).", "interface", "rule", "result")
	cookieEventsDesc = desc("syncookie_events_total",
		"SYN cookie events: keepalive, a refused SYN passed to the stack so that its listeners keep "+
			"accepting cookie ACKs (one a second per destination); unanswered, a refused SYN that could not be "+
			"answered (SYN+FIN, a fragment, a shape the answer does not follow) and was dropped.",
		"interface", "event")

	rejectAnswersDesc = desc("reject_answers_total",
		"Packets over the limit of a rule with action reject, by result: sent, answered with a TCP reset or an "+
			"ICMP error (as xdplimit_packets_total{verdict=\"reject\"}); suppressed, dropped unanswered (see "+
			"xdplimit_reject_suppressed_total for why).", "interface", "rule", "result")
	rejectSuppressedDesc = desc("reject_suppressed_total",
		"Packets reject rules dropped unanswered, by reason: budget, the policy's reject budget was spent; source, "+
			"the source had an answer within the second; never, no answer may go (from or to an address that is "+
			"not one host's, a link-layer broadcast, an ICMP error, a reset, a non-first fragment); unanswered, none "+
			"could be built (too short to quote, a shape the answer does not follow).", "interface", "reason")
)

const upHelp = "1 when the interface's maps were read at this scrape, 0 when reading them failed (see /healthz)."

var allDescs = []*prometheus.Desc{
	packetsDesc, bytesDesc, levelDropsDesc, trackedDesc, capacityDesc, tableCapacityDesc, tableEntriesDesc, insertsDesc, evictionsDesc,
	insertFailDesc, contendedDesc, cachedDesc, untrackedDesc, unparsedDesc, unparsedDropDesc, policyInfoDesc, programInfoDesc, attachTimeDesc, upDesc,
	bansActiveDesc, bansStartedDesc, bansEndedDesc, bansReplacedDesc, cookieACKsDesc, cookieEventsDesc,
	rejectAnswersDesc, rejectSuppressedDesc,
}

// target is one interface the collector reads.
type target struct {
	iface  string
	l      *maps.Limiter
	progID ebpf.ProgramID
}

// collector reads the maps of every registered interface at scrape time.
type collector struct {
	log *slog.Logger

	mu      sync.Mutex
	targets map[string]*target
	lastErr map[string]string // per interface, to log a failure once, not every scrape
}

func newCollector(log *slog.Logger) *collector {
	return &collector{log: log, targets: map[string]*target{}, lastErr: map[string]string{}}
}

func (c *collector) add(t *target) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.targets[t.iface]; ok {
		return errors.New("interface " + t.iface + " is already registered")
	}
	c.targets[t.iface] = t
	return nil
}

func (c *collector) remove(iface string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.targets, iface)
	delete(c.lastErr, iface)
}

// list returns the targets sorted by interface.
func (c *collector) list() []*target {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*target, 0, len(c.targets))
	for _, t := range c.targets {
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b *target) int { return cmp.Compare(a.iface, b.iface) })
	return out
}

func (c *collector) noteErr(iface string, err error) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	c.mu.Lock()
	prev := c.lastErr[iface]
	c.lastErr[iface] = msg
	c.mu.Unlock()
	switch {
	case msg != "" && msg != prev:
		c.log.Warn("metrics: cannot read the limiter's maps", "interface", iface, "err", err)
	case msg == "" && prev != "":
		c.log.Info("metrics: the limiter's maps are readable again", "interface", iface)
	}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	for _, t := range c.list() {
		s, err := Read(t.iface, t.l)
		c.noteErr(t.iface, err)
		if err != nil {
			ch <- prometheus.MustNewConstMetric(upDesc, prometheus.GaugeValue, 0, t.iface)
			continue
		}
		ch <- prometheus.MustNewConstMetric(upDesc, prometheus.GaugeValue, 1, t.iface)
		collectSnapshot(ch, s, t.progID)
	}
}

func collectSnapshot(ch chan<- prometheus.Metric, s Snapshot, progID ebpf.ProgramID) {
	iface := s.Interface
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, se := range s.Series() {
		counter(packetsDesc, se.Value.Packets, iface, se.Rule, se.Verdict.String())
		counter(bytesDesc, se.Value.Bytes, iface, se.Rule, se.Verdict.String())
	}
	cookies, rejects := false, false
	for _, r := range s.Rules {
		for level, n := range r.LevelDrops {
			counter(levelDropsDesc, n, iface, r.Name, strconv.Itoa(level))
		}
		if r.SynCookie {
			cookies = true
			counter(cookieACKsDesc, r.CookieACKs[0], iface, r.Name, "valid")
			counter(cookieACKsDesc, r.CookieACKs[1], iface, r.Name, "invalid")
		}
		if r.Reject {
			rejects = true
			counter(rejectAnswersDesc, r.Verdicts[maps.VerdictReject].Packets, iface, r.Name, "sent")
			counter(rejectAnswersDesc, r.RejectSuppressed, iface, r.Name, "suppressed")
		}
	}
	if rejects {
		for _, c := range maps.RejectReasons {
			counter(rejectSuppressedDesc, s.Counters[c].Packets, iface, maps.RejectReason(c))
		}
	}
	if cookies {
		counter(cookieEventsDesc, s.Counters[maps.CounterCookieKeepalive].Packets, iface, "keepalive")
		counter(cookieEventsDesc, s.Counters[maps.CounterCookieUnanswered].Packets, iface, "unanswered")
	}
	gauge(trackedDesc, float64(s.TrackedSources()), iface)
	gauge(capacityDesc, float64(s.Capacity), iface)
	for _, t := range s.Tables() {
		gauge(tableCapacityDesc, float64(t.Capacity), iface, t.Name)
		gauge(tableEntriesDesc, float64(t.Entries), iface, t.Name)
	}
	counter(insertsDesc, s.Inserts(), iface)
	counter(evictionsDesc, s.Evictions(), iface)
	counter(insertFailDesc, s.Counters[maps.CounterInsertFail].Packets, iface)
	counter(contendedDesc, s.Counters[maps.CounterCASExhausted].Packets, iface)
	counter(untrackedDesc, s.Counters[maps.CounterUntracked].Packets, iface)
	counter(cachedDesc, s.Counters[maps.CounterFlowCached].Packets, iface, "flow")
	counter(cachedDesc, s.Counters[maps.CounterRefusedCached].Packets, iface, "refused")
	for k, u := range s.Unparsed {
		counter(unparsedDesc, u.Packets, iface, maps.UnparsedKind(k).String())
		counter(unparsedDropDesc, u.Dropped, iface, maps.UnparsedKind(k).String())
	}
	for origin, n := range s.BansByOrigin() {
		gauge(bansActiveDesc, float64(n), iface, origin)
	}
	byRules, manual := s.BansStarted()
	counter(bansStartedDesc, byRules, iface, "rule")
	counter(bansStartedDesc, manual, iface, "manual")
	counter(bansEndedDesc, s.BansEnded(), iface)
	counter(bansReplacedDesc, s.Counters[maps.CounterBanReplaced].Packets, iface)
	gauge(policyInfoDesc, 1, iface, policySHA(s.Meta))
	gauge(programInfoDesc, 1, iface, s.Meta.AttachMode.String(), strconv.FormatUint(uint64(progID), 10))
	if t := s.Meta.Attached; !t.IsZero() {
		gauge(attachTimeDesc, float64(t.UnixNano())/1e9, iface)
	}
}

func policySHA(m maps.Meta) string { return hex.EncodeToString(m.PolicySHA256[:]) }
