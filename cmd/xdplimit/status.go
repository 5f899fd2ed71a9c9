// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/xdplimit/xdplimit/agent"
	"github.com/xdplimit/xdplimit/internal/termsafe"
	"github.com/xdplimit/xdplimit/loader"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/metrics"
)

func newStatusCmd() *cobra.Command {
	var o statusFlags
	cmd := &cobra.Command{
		Use:   "status [IFACE]",
		Short: "Show where the limiter is attached, its policy and per-rule counters, or what it holds for one source",
		Long: `status reports, for IFACE or every interface the limiter is attached to,
where and how it is attached, its policy, and the counters of every rule.

With --source ADDR it reports instead what the limiter holds for that
address now: the allow/deny entry and the bans that cover it, every rule it
can match (as far as an address decides) and each level's state for it:
what is left of its limit, when it is admitted again, whether it is tracked
or still counted by the admission sketch. It reads the live maps with a few
lookups, never walking a table. The same answer, as JSON, is served at
GET /v1/sources/ADDR on the metrics address.

-o json prints either as JSON (docs/json.md).`,
		Args: cobra.MatchAll(cobra.MaximumNArgs(1), ifaceNames),
	}
	output := addOutputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		var err error
		if o.addr, err = o.parse(cmd); err != nil {
			return err
		}
		ifaces := args
		if len(ifaces) == 0 {
			if ifaces, err = loader.List(); err != nil {
				return err
			}
		}
		w := cmd.OutOrStdout()
		if len(ifaces) == 0 && *output == outputText {
			fmt.Fprintln(w, "xdplimit is not attached anywhere")
			return nil
		}
		return o.report(w, ifaces, *output)
	}
	cmd.Flags().BoolVar(&o.sources, "count-sources", false, "count the tracked sources (walks the whole table)")
	cmd.Flags().StringVar(&o.source, "source", "", "report what the limiter holds for the source address `ADDR`")
	cmd.Flags().Uint16Var(&o.port, "port", 0, "with --source: read the levels keyed by address and port for `PORT`")
	return cmd
}

// statusFlags are the flags of `status`, and the address --source gave.
type statusFlags struct {
	sources bool
	source  string
	port    uint16
	addr    netip.Addr
}

// parse reads the address of --source; --port alone is refused.
func (o *statusFlags) parse(cmd *cobra.Command) (netip.Addr, error) {
	if o.source == "" {
		if cmd.Flags().Changed("port") {
			return netip.Addr{}, errors.New("--port goes with --source")
		}
		return netip.Addr{}, nil
	}
	addr, err := netip.ParseAddr(o.source)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("--source %q: not an IP address", o.source)
	}
	return addr, nil
}

// report prints each interface's status, or what it holds for the
// source, as output says: text as it goes, JSON once all are read.
func (o *statusFlags) report(w io.Writer, ifaces []string, output string) error {
	all := statusesJSON{Interfaces: []statusJSON{}}
	found := metrics.Sources{Address: o.addr.Unmap().String(), Interfaces: []metrics.SourceReport{}}
	for _, iface := range ifaces {
		s, err := loader.Open(iface)
		if err != nil {
			return err
		}
		switch {
		case o.source != "":
			r := metrics.ReportSource(iface, s.Limiter, o.addr, o.port)
			if r.Error == "" && output == outputText {
				printSource(w, r, o.addr.Unmap())
			}
			found.Interfaces = append(found.Interfaces, r)
			if r.Error != "" {
				err = fmt.Errorf("%s: %s", iface, r.Error)
			}
		case output == outputJSON:
			var st statusJSON
			if st, err = statusOf(s, o.sources); err == nil {
				all.Interfaces = append(all.Interfaces, st)
			}
		default:
			err = printStatus(w, s, o.sources)
		}
		s.Close()
		if err != nil {
			return err
		}
	}
	switch {
	case output == outputText:
		return nil
	case o.source != "":
		return printJSON(w, found)
	}
	return printJSON(w, all)
}

func printStatus(w io.Writer, s *loader.State, countSources bool) error {
	m := s.Meta
	owner := "no attach process (it exited or was killed; `xdplimit detach` removes the limiter)"
	if loader.OwnerAlive(m.Pid) {
		owner = fmt.Sprintf("attach process pid %d", m.Pid)
	}
	fmt.Fprintf(w, "%s: attached (%s), program id %d, since %s, %s\n", s.Interface, s.Mode(), s.ProgramID,
		m.Attached.Format(time.RFC3339), owner)
	fmt.Fprintf(w, "  policy: %s (sha256 %s)\n", termsafe.Escape(m.PolicyPath), hex.EncodeToString(m.PolicySHA256[:])[:16])
	tracked := "not counted (--count-sources)"
	if countSources {
		n, err := s.Limiter.TrackedSources()
		if err != nil {
			return err
		}
		tracked = fmt.Sprint(n)
	}
	fmt.Fprintf(w, "  clock: %s (tick %v); state table: %s tracked of %d\n", m.Clock,
		m.Tick, tracked, s.Limiter.SourcesCapacity())
	bans, err := s.Limiter.Bans()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "  bans: %d in force of %d (xdplimit bans %s)\n", len(bans), s.Limiter.BansCapacity(), s.Interface)
	rules, err := s.Limiter.RuleStats()
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "  rule\tpass pkts\tpass bytes\tdrop pkts\tdrop bytes\tshadow pkts\tcookie pkts\treject pkts\t")
	var cookies, rejects []maps.RuleStat
	for _, r := range rules {
		v := r.Verdicts
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", termsafe.Escape(r.Name), v[maps.VerdictPass].Packets, v[maps.VerdictPass].Bytes,
			v[maps.VerdictDrop].Packets, v[maps.VerdictDrop].Bytes, v[maps.VerdictShadow].Packets, v[maps.VerdictCookie].Packets,
			v[maps.VerdictReject].Packets)
		if r.SynCookie {
			cookies = append(cookies, r)
		}
		if r.Reject {
			rejects = append(rejects, r)
		}
	}
	tw.Flush()
	for _, r := range cookies {
		fmt.Fprintf(w, "  syncookie %s: %d SYNs answered, ACKs with a valid cookie %d, with a wrong one %d (dropped)\n",
			termsafe.Escape(r.Name), r.Verdicts[maps.VerdictCookie].Packets, r.CookieACKs[0], r.CookieACKs[1])
	}
	cs, err := s.Limiter.Counters()
	if err != nil {
		return err
	}
	for _, r := range rejects {
		fmt.Fprintf(w, "  reject %s: %d answers sent, %d packets dropped unanswered\n",
			termsafe.Escape(r.Name), r.Verdicts[maps.VerdictReject].Packets, r.RejectSuppressed)
	}
	if len(rejects) > 0 {
		fmt.Fprintf(w, "  unanswered by reason:")
		for _, c := range maps.RejectReasons {
			fmt.Fprintf(w, " %s %d", maps.RejectReason(c), cs[c].Packets)
		}
		fmt.Fprintln(w)
	}
	if err := printGlobalCounters(w, s.Limiter, cs); err != nil {
		return err
	}
	levels, err := s.Limiter.FleetLevels()
	if err != nil {
		return err
	}
	if len(levels) > 0 {
		printFleet(w, s.Interface, len(levels), loader.OwnerAlive(m.Pid), cs[maps.CounterFleetLost].Packets)
	}
	printAutopilotSummary(w, autopilotOf(context.Background(), s.Interface, loader.OwnerAlive(m.Pid)))
	return nil
}

// printFleet reports the fleet sync of a policy with fleet levels, as the
// attach process last wrote it.
func printFleet(w io.Writer, iface string, levels int, owner bool, lost uint64) {
	fs, err := agent.ReadFleetStatus(iface)
	switch {
	case !owner:
		fmt.Fprintf(w, "  fleet: %d levels, no sync running (no attach process): enforced from local state\n", levels)
	case err != nil:
		fmt.Fprintf(w, "  fleet: %d levels, sync state unknown (%v)\n", levels, err)
	case fs.Up:
		fmt.Fprintf(w, "  fleet: %d levels, Redis %v namespace %s up since %s, sync %s\n", levels, escapeAll(fs.Redis),
			termsafe.Escape(fs.Namespace), fs.Since.Format(time.RFC3339), fs.Sync)
	case !fs.Known:
		fmt.Fprintf(w, "  fleet: %d levels, Redis %v: first sync pending\n", levels, escapeAll(fs.Redis))
	default:
		fmt.Fprintf(w, "  fleet: %d levels, Redis %v DOWN since %s (%s: %s), enforcing with fallback %s\n", levels,
			escapeAll(fs.Redis), fs.Since.Format(time.RFC3339), fs.ErrorKind, termsafe.Escape(fs.LastError), fs.Fallback)
	}
	if lost > 0 {
		fmt.Fprintf(w, "  fleet: %d key reports lost to a full ring (synced at their next report)\n", lost)
	}
}

// escapeAll escapes each of ss for the terminal (termsafe): the policy
// path, rule names and fleet status come from files and pinned maps that
// any root process may have written.
func escapeAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = termsafe.Escape(s)
	}
	return out
}

// printConversations writes the conversation checks' line: how each runs,
// whether it is armed, and what they dropped. Nothing when every check is
// off and never dropped.
func printConversations(w io.Writer, l *maps.Limiter, cs map[maps.Counter]maps.CounterValue) error {
	cv, err := l.ConversationsInForce()
	if err != nil {
		return err
	}
	armed, err := l.ConvArmed()
	if err != nil {
		return err
	}
	dropped := cs[maps.CounterNoConnection].Packets + cs[maps.CounterNoSocket].Packets + cs[maps.CounterNoRequest].Packets +
		cs[maps.CounterNoConnectionShadow].Packets + cs[maps.CounterNoSocketShadow].Packets + cs[maps.CounterNoRequestShadow].Packets
	if !cv.Any() && dropped == 0 {
		return nil
	}
	fmt.Fprintf(w, "  conversations:")
	for _, c := range maps.AllChecks {
		cc := cv.Of(c)
		state := cc.When()
		if cv.JudgesAll(c, armed) {
			state += ", armed"
		}
		if cc.On && cc.Shadow {
			state += ", in shadow"
		}
		if cc.Conntrack {
			state += ", forwarded by conntrack"
		}
		fmt.Fprintf(w, " %s %s;", c, state)
	}
	fmt.Fprintf(w, " dropped no_connection %d, no_socket %d, no_request %d (in shadow %d, %d, %d); %d looked up, %d requests recorded\n",
		cs[maps.CounterNoConnection].Packets, cs[maps.CounterNoSocket].Packets, cs[maps.CounterNoRequest].Packets,
		cs[maps.CounterNoConnectionShadow].Packets, cs[maps.CounterNoSocketShadow].Packets, cs[maps.CounterNoRequestShadow].Packets,
		cs[maps.CounterConvLookups].Packets, cs[maps.CounterRequests].Packets)
	return nil
}

// printGlobalCounters writes the counters of what no rule decided: the
// lists, the conversation checks, the state table.
func printGlobalCounters(w io.Writer, l *maps.Limiter, cs map[maps.Counter]maps.CounterValue) error {
	fmt.Fprintf(w, "  allow %d, deny %d, deny (shadow) %d, unmatched %d, malformed %d, non-IP %d pkts\n",
		cs[maps.CounterAllow].Packets, cs[maps.CounterDeny].Packets, cs[maps.CounterDenyShadow].Packets,
		cs[maps.CounterUnmatched].Packets, cs[maps.CounterMalformed].Packets, cs[maps.CounterNonIP].Packets)
	if err := printConversations(w, l, cs); err != nil {
		return err
	}
	fmt.Fprintf(w, "  new sources %d, table insert failures %d, contended updates %d, refused from cache %d (by flow %d)\n",
		cs[maps.CounterNewSource].Packets, cs[maps.CounterInsertFail].Packets, cs[maps.CounterCASExhausted].Packets,
		cs[maps.CounterRefusedCached].Packets+cs[maps.CounterFlowCached].Packets, cs[maps.CounterFlowCached].Packets)
	return nil
}
