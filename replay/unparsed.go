// SPDX-License-Identifier: Apache-2.0

package replay

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/xdplimit/xdplimit/maps"
)

// tallyParse counts what the parser could not judge, by kind: the frames it
// gave up on (the policy's unparsed action decided them), and the IPv6
// packets with more extension headers than it follows (the rules judged
// them). It returns what the parser found.
func (r *Report) tallyParse(l *maps.Limiter, d maps.Decision, bytes int) (maps.Parsed, error) {
	pp, err := l.LastParse()
	if err != nil {
		return pp, fmt.Errorf("reading the parse: %w", err)
	}
	k := pp.Unparsed
	if d.Why != maps.WhyMalformed {
		k = -1
		if pp.LongChain {
			k = maps.UnparsedLongChain
		}
	}
	if k >= 0 && int(k) < maps.UnparsedKinds {
		r.Unparsed[k].add(bytes)
	}
	if d.Why == maps.WhyMalformed && d.Verdict != maps.VerdictPass {
		r.MalformedDropped.add(bytes)
	}
	return pp, nil
}

// unparsedText explains a frame the parser gave up on.
func unparsedText(k maps.UnparsedKind, verdict string) string {
	why := map[maps.UnparsedKind]string{
		maps.UnparsedTruncated:   "a header runs past the frame or the IP length",
		maps.UnparsedBadLength:   "an IP or UDP length the stack refuses",
		maps.UnparsedBadHeader:   "a bad IP version or header length, or TCP data offset",
		maps.UnparsedBadChecksum: "a bad IPv4 header checksum",
		maps.UnparsedVLANTags:    "more VLAN tags than the parser pops",
	}[k]
	return fmt.Sprintf("unparsed, %v (%s): the policy's unparsed action: %s", k, why, verdict)
}

// writeUnparsed lists the unparsed kinds the capture held.
func (r *Report) writeUnparsed(w io.Writer) {
	any := false
	for _, c := range r.Unparsed {
		any = any || c.Packets > 0
	}
	if !any {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "UNPARSED KIND\tPKTS\tBYTES")
	for k, c := range r.Unparsed {
		if c.Packets == 0 {
			continue
		}
		note := ""
		if maps.UnparsedKind(k) == maps.UnparsedLongChain {
			note = " (judged by the rules, by source, as fragments)"
		}
		fmt.Fprintf(tw, "%v\t%d\t%d%s\n", maps.UnparsedKind(k), c.Packets, c.Bytes, note)
	}
	tw.Flush()
}
