// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"net/netip"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/internal/termsafe"
	"github.com/xdplimit/xdplimit/maps"
)

// SourceRate is a source's estimated drop rate from the sampled drops.
type SourceRate struct {
	Source      netip.Addr
	Rule        string // the rule that dropped most of its samples, or _deny
	DropsPerSec float64
	Samples     int
}

// TopSources estimates the k sources dropped most, from the drops the
// datapath sampled in an interval: each sample stands for totalDrops /
// len(samples) drops, whatever the sampling rate and however often a ring
// wrapped. Finding them by walking the state table each second is what top
// must not do.
func TopSources(samples []maps.DropSample, names map[uint32]string, totalDrops uint64, dt time.Duration, k int) []SourceRate {
	if len(samples) == 0 || dt <= 0 {
		return nil
	}
	weight := float64(totalDrops) / float64(len(samples)) / dt.Seconds()
	type agg struct {
		n     int
		rules map[string]int
	}
	by := map[netip.Addr]*agg{}
	for _, s := range samples {
		a := by[s.Source]
		if a == nil {
			a = &agg{rules: map[string]int{}}
			by[s.Source] = a
		}
		a.n++
		rule := names[s.Slot]
		if n, ok := s.ListName(); ok {
			rule = n
		}
		a.rules[rule]++
	}
	out := make([]SourceRate, 0, len(by))
	for src, a := range by {
		best, bestN := "", 0
		for r, n := range a.rules {
			if n > bestN || (n == bestN && r < best) {
				best, bestN = r, n
			}
		}
		out = append(out, SourceRate{Source: src, Rule: best, DropsPerSec: float64(a.n) * weight, Samples: a.n})
	}
	slices.SortFunc(out, func(a, b SourceRate) int {
		if a.Samples != b.Samples {
			return b.Samples - a.Samples
		}
		return a.Source.Compare(b.Source)
	})
	if len(out) > k {
		out = out[:k]
	}
	return out
}

// TotalDrops is the number of dropped, shadow-dropped and answered (with a
// SYN cookie, a reset or an ICMP error) packets between two snapshots,
// over every rule and the deny list: what samples stand for.
func TotalDrops(prev, cur Snapshot) uint64 {
	var n float64
	for _, r := range Rates(prev, cur) {
		refused := r.Rates[maps.VerdictDrop].Packets + r.Rates[maps.VerdictShadow].Packets +
			r.Rates[maps.VerdictCookie].Packets + r.Rates[maps.VerdictReject].Packets
		n += refused * cur.Time.Sub(prev.Time).Seconds()
	}
	return uint64(math.Round(n))
}

// Rate is a counter's change per second.
type Rate struct{ Packets, Bytes float64 }

// RuleRates is one line of `xdplimit top`: a rule (or a reserved rule such
// as _deny) with its counters and their rates between two snapshots.
type RuleRates struct {
	Rule   string
	Totals [maps.NumVerdicts]maps.CounterValue // by maps.Verdict
	Rates  [maps.NumVerdicts]Rate              // by maps.Verdict
}

// Rates compares two snapshots of one interface, taken dt = cur.Time -
// prev.Time apart, rule by rule in cur's order. A rule absent from prev, or
// whose counters went back (removed and added again by reloads in between),
// counts from zero: a new rule's counters start at zero.
func Rates(prev, cur Snapshot) []RuleRates {
	dt := cur.Time.Sub(prev.Time).Seconds()
	type key struct {
		rule string
		v    maps.Verdict
	}
	before := map[key]maps.CounterValue{}
	for _, s := range prev.Series() {
		before[key{s.Rule, s.Verdict}] = s.Value
	}
	var out []RuleRates
	index := map[string]int{}
	for _, s := range cur.Series() {
		i, ok := index[s.Rule]
		if !ok {
			i = len(out)
			index[s.Rule] = i
			out = append(out, RuleRates{Rule: s.Rule})
		}
		r := &out[i]
		r.Totals[s.Verdict] = s.Value
		d := s.Value
		if b, ok := before[key{s.Rule, s.Verdict}]; ok && b.Packets <= d.Packets && b.Bytes <= d.Bytes {
			d.Packets -= b.Packets
			d.Bytes -= b.Bytes
		}
		if dt > 0 {
			r.Rates[s.Verdict] = Rate{float64(d.Packets) / dt, float64(d.Bytes) / dt}
		}
	}
	return out
}

// WriteTop writes one frame of `xdplimit top`: per-rule pass, drop,
// shadow-drop, SYN-cookie and reject rates between prev and cur, totals,
// and the state table's pressure. Plain text, no escape sequences: the
// interface's name, the policy's path and the rules' names, read from the
// pinned maps, are escaped (termsafe).
func WriteTop(w io.Writer, prev, cur Snapshot, progID ebpf.ProgramID, sources []SourceRate) error {
	bw := bufio.NewWriter(w)
	dt := cur.Time.Sub(prev.Time)
	m := cur.Meta
	fmt.Fprintf(bw, "xdplimit top %s  %s  interval %.2fs  %s mode, program %d\n", termsafe.Escape(cur.Interface),
		cur.Time.Format("2006-01-02 15:04:05"), dt.Seconds(), m.AttachMode, progID)
	sha := hex.EncodeToString(m.PolicySHA256[:])
	fmt.Fprintf(bw, "policy %s (sha256 %s)\n\n", orDash(termsafe.Escape(m.PolicyPath)), sha[:16])

	tw := tabwriter.NewWriter(bw, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "RULE\tPASS/s\tDROP/s\tSHADOW/s\tCOOKIE/s\tREJECT/s\tPASS bit/s\tDROP bit/s\tDROP %\tPASSED\tDROPPED\tSHADOW\tCOOKIES\tREJECTS\t")
	var sum RuleRates
	sum.Rule = "total"
	rows := Rates(prev, cur)
	for _, r := range rows {
		for v := range r.Totals {
			sum.Totals[v].Packets += r.Totals[v].Packets
			sum.Totals[v].Bytes += r.Totals[v].Bytes
			sum.Rates[v].Packets += r.Rates[v].Packets
			sum.Rates[v].Bytes += r.Rates[v].Bytes
		}
	}
	for _, r := range append(rows, sum) {
		p, d, s := r.Rates[maps.VerdictPass], r.Rates[maps.VerdictDrop], r.Rates[maps.VerdictShadow]
		c, j := r.Rates[maps.VerdictCookie], r.Rates[maps.VerdictReject]
		share := "-"
		if all := p.Packets + d.Packets + s.Packets + c.Packets + j.Packets; all > 0 {
			share = fmt.Sprintf("%.1f%%", 100*d.Packets/all)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t\n", termsafe.Escape(r.Rule),
			si(p.Packets), si(d.Packets), si(s.Packets), si(c.Packets), si(j.Packets), si(8*p.Bytes), si(8*d.Bytes), share,
			r.Totals[maps.VerdictPass].Packets, r.Totals[maps.VerdictDrop].Packets, r.Totals[maps.VerdictShadow].Packets,
			r.Totals[maps.VerdictCookie].Packets, r.Totals[maps.VerdictReject].Packets)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	per := func(c maps.Counter) string {
		return si(perSecond(prev.Counters[c].Packets, cur.Counters[c].Packets, dt)) + "/s"
	}
	fill := 0.0
	if cur.Capacity > 0 {
		fill = 100 * float64(cur.TrackedSources()) / float64(cur.Capacity)
	}
	fmt.Fprintf(bw, "\nstate table: ~%s of %s entries (%.1f%%), inserts %s, evictions ~%s/s, insert failures %s, contended %s\n",
		si(float64(cur.TrackedSources())), si(float64(cur.Capacity)), fill, per(maps.CounterNewSource),
		si(perSecond(prev.Evictions(), cur.Evictions(), dt)), per(maps.CounterInsertFail), per(maps.CounterCASExhausted))
	if line := cur.conversationsLine(); line != "" {
		fmt.Fprintf(bw, "conversations: %s\n", line)
	}
	fmt.Fprintf(bw, "\ntop dropped sources (estimated from sampled drops):\n")
	if len(sources) == 0 {
		fmt.Fprintf(bw, "  none dropped in this interval\n")
		return bw.Flush()
	}
	tw = tabwriter.NewWriter(bw, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "SOURCE\tRULE\tDROP/s\tSAMPLES\t")
	for _, s := range sources {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t\n", s.Source, termsafe.Escape(s.Rule), si(s.DropsPerSec), s.Samples)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return bw.Flush()
}

func perSecond(before, after uint64, dt time.Duration) float64 {
	if dt <= 0 {
		return 0
	}
	if after < before {
		before = 0
	}
	return float64(after-before) / dt.Seconds()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// si formats a rate with an SI suffix and three significant digits.
func si(v float64) string {
	if v < 0 || math.IsNaN(v) {
		return "-"
	}
	if v < 1000 {
		if v != 0 && v < 10 && v != math.Trunc(v) {
			return fmt.Sprintf("%.1f", v)
		}
		return fmt.Sprintf("%.0f", v)
	}
	for _, u := range []string{"k", "M", "G", "T"} {
		v /= 1000
		if v < 1000 || u == "T" {
			switch {
			case v < 10:
				return fmt.Sprintf("%.2f%s", v, u)
			case v < 100:
				return fmt.Sprintf("%.1f%s", v, u)
			}
			return fmt.Sprintf("%.0f%s", v, u)
		}
	}
	panic("unreachable")
}
