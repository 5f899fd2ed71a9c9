// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"strings"
)

// The conversation checks' section of BENCHMARKS.md: the micro rows
// against the parser alone, and the veth floods against bare XDP_DROP. No
// target is set for them: numbers only.

// convRow is one micro row of the section: the case, the case it is
// measured above (the parser alone of its frame), the same packet with no
// check when it passes, and what the row is, in a sentence or two.
type convRow struct {
	name, floor, without, what string
}

var convRows = []convRow{
	{mConvTCPDrop, mConvTCPParser, "",
		"A TCP ACK to this host's address and a port without a socket: the local table's lookup, the socket lookup (`bpf_skc_lookup_tcp`) that finds nothing, the drop counted."},
	{mConvCTDrop, mConvTCPParser, "",
		"A TCP ACK to an address not in the local table, with `forwarded: conntrack`: the local table's miss, then conntrack's lookup (`bpf_xdp_ct_lookup`) that finds no entry, and the drop."},
	{mConvUDPDrop, mParser, "",
		"A UDP datagram to this host's address and a port without a socket: the local table's lookup, `bpf_sk_lookup_udp` finding nothing, the drop."},
	{mConvReflDrop, mParser, "",
		"A UDP datagram from port 53 to this host, with no request recorded by the egress program: the local table's lookup, the reflector port's, the request table's miss, the drop."},
	{mConvTCPPass, mConvTCPParser, mConvTCPNone,
		"An ACK carrying a real TCP connection's four addresses and ports (over loopback, in the benchmark's namespace): the socket lookup finds the established socket, releases it, and the packet passes. The last column is what the check adds to the same ACK with no check."},
	{mConvUDPPass, mParser, mParse,
		"A datagram to a bound UDP socket: the lookup finds it, and the packet passes. The last column is what the check adds to a datagram with no check (the empty policy's pass)."},
}

func (r *report) writeConversations(b *strings.Builder) {
	m := r.Micro
	var cv *convVeth
	if r.Macro != nil {
		cv = r.Macro.Conv
	}
	if (m == nil || m.find(mConvTCPDrop) == nil) && cv == nil {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("## Conversation checks\n\n")
	p("What each check of `conversations:` ([docs/conversations.md](docs/conversations.md)) costs, alone in its\n")
	p("program with `when: always`, so that it judges every packet; the destination is in the local table\n")
	p("(`SetLocal`) unless the row says otherwise. No target is set: the numbers are reported.\n\n")
	if m != nil && m.find(mConvTCPDrop) != nil {
		r.writeConvMicro(b)
	}
	if cv != nil {
		writeConvVeth(b, cv, r.Macro)
	}
}

func (r *report) writeConvMicro(b *strings.Builder) {
	m := r.Micro
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("Per packet (the micro table's conversation rows, BPF_PROG_TEST_RUN, measured interleaved with the\n")
	p("other cases): ns/packet above the parser alone of the same kind of frame (TCP ACK or UDP). The socket\n")
	p("lookups of a test run search the network namespace of the thread running it, so these rows run in a\n")
	p("namespace the benchmark creates, holding a listener, a connection established to it over loopback, and\n")
	p("a bound UDP socket.\n\n")
	p("| Case | ns/packet (median) | Above the parser alone (ns) | Added to the same packet without the check (ns) | What it measures |\n")
	p("|---|---:|---:|---:|---|\n")
	for _, row := range convRows {
		c := m.find(row.name)
		if c == nil {
			continue
		}
		if c.err != nil || len(c.ns) == 0 {
			p("| %s | %s | | | %s |\n", row.name, strings.ReplaceAll(errString(c.err), "\n", " "), row.what)
			continue
		}
		above, added := "-", "-"
		if f := m.measuredCase(row.floor); f != nil {
			above = fmt.Sprintf("%.1f", c.ns.median()-f.ns.median())
		}
		if w := m.measuredCase(row.without); w != nil {
			added = fmt.Sprintf("%.1f", c.ns.median()-w.ns.median())
		}
		p("| %s | %.1f | %s | %s | %s |\n", row.name, c.ns.median(), above, added, row.what)
	}
	p("\n")
}

func writeConvVeth(b *strings.Builder, cv *convVeth, mr *macroResults) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("On a veth: each flood that one check exists to drop, %d frames (54 or 60 bytes) per run from both CPUs by the\n", mr.Count)
	p("live-frames generator, to a receiver whose address is in the local table; %d repetitions, in the veth\n", mr.Reps)
	p("section's repetitions (after each one's other floods), the receivers' order rotated each. Per CPU-s\n")
	p("counts the frames the receiver's XDP program saw per second of CPU time spent on the run (the sending\n")
	p("threads, which run the receiver in their softirq, and ksoftirqd), as the veth section does; the\n")
	p("generator's own work is in it, so the ratios understate the receivers' differences. Dropped is the\n")
	p("check's own drop counter over those frames.\n\n")
	p("- **forged ACKs**: the ACK a flood of made-up connections sends, to a port with a listener, so that\n")
	p("  the socket lookup finds the listener and the check refuses the ACK for carrying no valid SYN cookie\n")
	p("  (the micro row's ACK goes to a closed port: its lookup finds nothing and checks no cookie).\n")
	p("- **UDP to closed ports**: the destination port random over all 65536 (`pktgen.Sources.DstPorts`), none\n")
	p("  with a socket: the lookup misses.\n")
	p("- **forged DNS answers**: from port 53, random sources, to one local port, no request recorded.\n\n")
	p("| Flood | Receiver | Mpps (min – max) | M per CPU-s (min – max) | × bare XDP_DROP (per CPU-s) | × the parser alone (per CPU-s) | Dropped by the check |\n")
	p("|---|---|---:|---:|---:|---:|---:|\n")
	var failed []string
	for _, f := range cv.Floods {
		for i, c := range f.configs {
			label := ""
			if i == 0 {
				label = f.label
			}
			for _, e := range c.errs {
				failed = append(failed, fmt.Sprintf("%s / %s: %s", f.id, c.label, e))
			}
			if len(c.cpuRate) == 0 {
				p("| %s | %s | failed | | | | |\n", label, c.label)
				continue
			}
			dropped := ""
			if c.check {
				dropped = pct(c.dropped.median())
			}
			p("| %s | %s | %.3f (%.3f – %.3f) | %.3f (%.3f – %.3f) | %.2f× | %.2f× | %s |\n", label, c.label,
				c.rate.median()/1e6, c.rate.min()/1e6, c.rate.max()/1e6, c.cpuRate.median()/1e6, c.cpuRate.min()/1e6, c.cpuRate.max()/1e6,
				f.cpuRatio(c.id, convBare), f.cpuRatio(c.id, convParser), dropped)
		}
	}
	p("\n")
	writeFailed(b, failed)
}
