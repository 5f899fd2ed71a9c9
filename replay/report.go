// SPDX-License-Identifier: Apache-2.0

package replay

import (
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/xdplimit/xdplimit/policy"
)

// RunFile replays the capture at path; see Run.
func RunFile(p *policy.Policy, path string, opts Options) (*Report, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	c, err := OpenCapture(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	defer c.Close()
	r, err := Run(p, c, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	r.Capture = path
	return r, nil
}

// Write prints the report. Everything in it is sorted or in policy order,
// so the same policy and capture always print the same text.
func (r *Report) Write(w io.Writer) error {
	ew := &errWriter{w: w}
	r.writeHeader(ew)
	r.writeRules(ew)
	r.writeOutsideRules(ew)
	r.writeBans(ew)
	r.writeUnparsed(ew)
	r.writeNotes(ew)
	r.writeTop(ew)
	r.writeExplained(ew)
	return ew.err
}

// writeHeader names the policy, the capture and the state table.
func (r *Report) writeHeader(w io.Writer) {
	p := r.Policy
	fmt.Fprintf(w, "policy %s (sha256 %s), mode %s\n", p.Path, hex.EncodeToString(p.SHA256[:8]), p.Mode)
	span := ""
	if r.Frames > 0 {
		span = fmt.Sprintf(" over %s", seconds(r.Last.Sub(r.First)))
	}
	name := r.Capture
	if name == "" {
		name = "capture"
	}
	cut := ""
	if c := r.CutOff; c != nil {
		cut = fmt.Sprintf(", cut short in frame %d at byte %d (see the warning)", c.Frame, c.End)
	}
	fmt.Fprintf(w, "capture %s: %d frames%s%s\n", name, r.Frames, span, cut)
	track := "every source tracked from its first packet"
	if r.TrackAfter > 1 {
		track = fmt.Sprintf("sources tracked from their %s packet in a sketch epoch", ordinal(r.TrackAfter))
	}
	fmt.Fprintf(w, "state table %d entries, %s\n\n", r.MaxSources, track)
}

// writeRules is the table of each rule's verdicts, with the notes its
// SYN-cookie and reject columns need.
func (r *Report) writeRules(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	// The SYN-ACKs a syncookie rule would send get a column of their own
	// where the policy has such a rule.
	cookies, rejects := false, false
	for _, rule := range r.Policy.Rules {
		cookies = cookies || rule.Action == policy.ActionSynCookie
		rejects = rejects || rule.Action == policy.ActionReject
	}
	head := ""
	if cookies {
		head += "\tSYN-ACKS SENT"
	}
	if rejects {
		head += "\tREJECTS SENT"
	}
	fmt.Fprintln(tw, "RULE\tPASS PKTS\tPASS BYTES\tDROP PKTS\tDROP BYTES\tSHADOW PKTS\tSHADOW BYTES"+head+"\tREFUSED BY LEVEL")
	for _, rr := range r.Rules {
		cols := ""
		if cookies {
			cols += fmt.Sprintf("\t%d", rr.Cookie.Packets)
		}
		if rejects {
			cols += fmt.Sprintf("\t%d", rr.Reject.Packets)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d%s\t%s\n", rr.Name, rr.Pass.Packets, rr.Pass.Bytes,
			rr.Drop.Packets, rr.Drop.Bytes, rr.Shadow.Packets, rr.Shadow.Bytes, cols, levels(rr.Refused))
	}
	tw.Flush()
	if cookies {
		fmt.Fprintln(w, "note: SYN-ACKS SENT are the SYNs over a syncookie rule's limit that the program would answer "+
			"with a SYN cookie; it passes one such SYN a second per destination to the stack instead (counted as a "+
			"pass), and a replay checks no ACK against the cookies (the captured host's listeners are not here)")
	}
	if rejects {
		fmt.Fprintln(w, "note: REJECTS SENT are the packets over a reject rule's limit that the program would answer "+
			"with a TCP reset or an ICMP error, within the policy's reject budget and one a second per source; "+
			"those it would not answer are in DROP")
	}
	fmt.Fprintln(w)
}

// writeOutsideRules is the table of what no rule decided: the lists,
// unmatched and malformed frames, bans, non-IP.
func (r *Report) writeOutsideRules(w io.Writer) {
	p := r.Policy
	denyVerdict := "drop"
	if p.Mode == policy.ModeShadow {
		denyVerdict = "shadow-drop"
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NOT BY A RULE\tPKTS\tBYTES\tVERDICT")
	type row struct {
		name    string
		c       Counts
		verdict string
	}
	rows := []row{
		{"allow list", r.Allow, "pass"},
		{"deny list", r.Deny, denyVerdict},
		{"unmatched", r.Unmatched, "pass"},
		{"malformed", Counts{r.Malformed.Packets - r.MalformedDropped.Packets, r.Malformed.Bytes - r.MalformedDropped.Bytes}, "pass"},
	}
	if u := p.Unparsed; u.Drop || u.Limit != nil {
		rows = append(rows, row{"malformed", r.MalformedDropped, "drop"})
	}
	if len(r.Bans) > 0 || r.Banned.Packets > 0 {
		banVerdict := "drop"
		if p.Mode == policy.ModeShadow {
			banVerdict = "shadow-drop"
		}
		rows = append(rows, row{"banned sources", r.Banned, banVerdict})
	}
	if p.Conversations.Reflection.When != policy.WhenOff {
		verdict := "drop"
		if p.Mode == policy.ModeShadow {
			verdict = "shadow-drop"
		}
		rows = append(rows, row{"answers to no request", r.NoRequest, verdict})
	}
	for _, o := range append(rows, row{"non-IP", r.NonIP, "pass"}) {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", o.name, o.c.Packets, o.c.Bytes, o.verdict)
	}
	tw.Flush()
}

// writeNotes says how many frames the replay could not run as they were
// captured, and what it did with them.
func (r *Report) writeNotes(w io.Writer) {
	for _, n := range []struct {
		count int
		text  string
	}{
		{int(r.Short.Packets), "shorter than an Ethernet header: counted as malformed without running the program, which refuses them"},
		{r.Truncated, "captured shorter than on the wire (snap length): padded with zeros to their length on the wire"},
		{r.Cut, "longer than the kernel test-runs (a page less head- and tailroom): it cut them, and their IP length then runs past the frame (unparsed, truncated), as no XDP program without multi-buffer support sees such frames on a device"},
		{r.Backwards, "stamped earlier than the frame before them: each ran at its own time"},
		{r.NoTime, "without a timestamp (pcapng simple packet blocks): each ran at the time of the frame before it, or of the first stamped frame"},
		{r.NoLinkLayer, "captured without an Ethernet header (Linux cooked capture, raw IP): each ran behind a synthesised one, counted in its bytes; vlan matches see no VLAN tag on them but one a Linux cooked SLL capture kept (SLL2 and raw IP keep none)"},
		{int(r.Outgoing.Packets), "sent by the capturing host (outgoing): not run, " + notReceived},
	} {
		if n.count > 0 {
			fmt.Fprintf(w, "note: %d %s %s\n", n.count, plural(n.count, "frame"), n.text)
		}
	}
	if r.Policy != nil && r.Policy.Conversations.Reflection.When != policy.WhenOff {
		if r.Outgoing.Packets == 0 {
			fmt.Fprintln(w, "note: no frame was the capturing host's (the capture does not say, and --local named no address): "+
				"the reflection guard judged nothing, as it judges only what is addressed to the host")
		} else {
			fmt.Fprintf(w, "note: the reflection guard knew %d %s the capturing host sent (the outgoing frames went through its request recorder)\n",
				r.RequestsRecorded, plural(int(r.RequestsRecorded), "request"))
		}
	}
	if len(r.NotReplayed) > 0 {
		fmt.Fprintf(w, "note: conversation checks not replayed (%s): they ask the sockets of the host that runs the replay, not the captured one's\n",
			strings.Join(r.NotReplayed, ", "))
	}
}

// writeTop is the table of the sources with the most dropped packets.
func (r *Report) writeTop(w io.Writer) {
	if len(r.Top) > 0 {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "TOP SOURCES DROPPED\tRULE\tDROP PKTS\tDROP BYTES\tSHADOW PKTS\tSHADOW BYTES")
		for _, s := range r.Top {
			src := "(no IP source)"
			if s.Source.IsValid() {
				src = s.Source.String()
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\n", src, s.Rule, s.Drop.Packets+s.Cookie.Packets+s.Reject.Packets,
				s.Drop.Bytes+s.Cookie.Bytes+s.Reject.Bytes, s.Shadow.Packets, s.Shadow.Bytes)
		}
		tw.Flush()
	}
}

// writeExplained is each frame --explain asked for, with what decided it.
func (r *Report) writeExplained(w io.Writer) {
	if len(r.Explained) > 0 {
		fmt.Fprintln(w)
	}
	for _, e := range r.Explained {
		fmt.Fprintf(w, "frame %d at +%s, %d bytes, %s\n  %s\n", e.Frame, seconds(e.Offset), e.Len, e.Packet, e.Text)
	}
}

// notReceived is why outgoing frames are not run.
const notReceived = "as an XDP program sees only the frames a device receives"

// Warnings are what an operator must know to read the report, for
// standard error: a capture cut short.
func (r *Report) Warnings() []string {
	if r.CutOff == nil {
		return nil
	}
	w := r.CutOff.Error()
	if r.Capture != "" {
		w = r.Capture + ": " + w
	}
	return []string{w}
}

// levels writes refusals by level as "own=5 agg0=2".
func levels(refused []uint64) string {
	s := ""
	for i, n := range refused {
		if i > 0 {
			s += " "
		}
		if i == 0 {
			s += "own=" + strconv.FormatUint(n, 10)
		} else {
			s += fmt.Sprintf("agg%d=%d", i-1, n)
		}
	}
	return s
}

// seconds prints a duration in seconds with nanosecond digits, as capture
// tools show times.
func seconds(d time.Duration) string {
	sign := ""
	if d < 0 {
		sign, d = "-", -d
	}
	return fmt.Sprintf("%s%d.%09ds", sign, d/time.Second, d%time.Second)
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

func ordinal(n uint32) string {
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return strconv.FormatUint(uint64(n), 10) + suffix
}

// errWriter keeps the first write error, so Write reports it once.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return len(p), nil
	}
	n, err := e.w.Write(p)
	if err != nil {
		e.err = err
	}
	return n, nil
}

// writeBans lists the bans rules started: when, for how long, and whether
// they ended within the capture.
func (r *Report) writeBans(w io.Writer) {
	if len(r.Bans) == 0 {
		return
	}
	span := r.Last.Sub(r.First)
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "BAN\tRULE\tFRAME\tSTART\tFOR\tENDS")
	for _, b := range r.Bans {
		ends := seconds(b.Start + b.For)
		if b.Start+b.For > span {
			ends += " (after the capture)"
		}
		rule := b.Rule
		if b.Shadow {
			rule += " (shadow)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%v\t%s\n", b.Prefix, rule, b.Frame, seconds(b.Start), b.For, ends)
	}
	tw.Flush()
}
