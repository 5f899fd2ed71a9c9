// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/spf13/cobra"

	"github.com/xdplimit/xdplimit/metrics"
	"github.com/xdplimit/xdplimit/policy"
	"github.com/xdplimit/xdplimit/replay"
)

// newPolicyTestCmd replays a capture through the real program with a policy,
// so that a policy can be tried on recorded traffic before it is enforced.
func newPolicyTestCmd() *cobra.Command {
	var o policyTestFlags
	cmd := &cobra.Command{
		Use:   "test FILE --pcap CAPTURE",
		Short: "Replay a packet capture through the XDP program with a policy",
		Long: `test loads the XDP program with the policy (without attaching it anywhere)
and runs every frame of a pcap or pcapng capture through it with
BPF_PROG_TEST_RUN, the capture's timestamps driving the program's clock. It
prints, per rule, the packets and bytes passed, dropped and shadow-dropped;
what the allow and deny lists, unmatched traffic, malformed and non-IP frames
amounted to; the sources with the most drops; and, for each --explain N, the
rule, level and key that decided frame N (numbered from 1, as in Wireshark).

Ethernet, Linux cooked (tcpdump -i any, SLL and SLL2) and raw IP captures
can be replayed. Frames captured without an Ethernet header run behind a
synthesised one, so vlan matches do not match them; frames the capturing
host sent (outgoing) are counted but not run, as XDP sees only received
frames. pcapng simple packet blocks, which carry no timestamp, run at the
time of the frame before them. A capture cut short at the end (a killed
tcpdump) is replayed up to the cut, with a warning. It needs the privileges
to load BPF programs (root or CAP_BPF).

--source ADDR reports what the limiter holds for that address at the end of
the capture, as status --source does on a running limiter. -o json prints
the report as JSON (docs/json.md).`,
		Args: cobra.ExactArgs(1),
	}
	output := addOutputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return runPolicyTest(cmd, args[0], o, *output)
	}
	cmd.Flags().StringVar(&o.pcap, "pcap", "", "capture to replay: pcap or pcapng, optionally gzipped")
	cmd.Flags().IntSliceVar(&o.explain, "explain", nil, "explain what decided frame `N` (1-based; repeatable, or a comma-separated list)")
	cmd.Flags().IntVar(&o.top, "top", 10, "list the `K` (source, rule) pairs with the most dropped packets")
	cmd.Flags().Uint32Var(&o.maxSources, "max-sources", replay.DefaultMaxSources,
		"size of the state table (entries), as given to attach: eviction under a many-source flood depends on it")
	cmd.Flags().Uint32Var(&o.trackAfter, "track-after", 1,
		"track a source from its Nth packet in a sketch epoch, as the running datapath does with 2 (1: from the first, exact; at most 255)")
	cmd.Flags().StringSliceVar(&o.sources, "source", nil,
		"report what the limiter holds for `ADDR` at the end of the capture (repeatable, or a comma-separated list)")
	cmd.Flags().Uint16Var(&o.port, "port", 0, "with --source: read the levels keyed by address and port for `PORT`")
	cmd.Flags().StringSliceVar(&o.local, "local", nil,
		"an address or prefix of the captured host (repeatable, or a comma-separated list): frames from it are the ones it sent, "+
			"for captures that do not say (tcpdump -i any and pcapng's direction flags do); the reflection guard replays them "+
			"as requests and judges the answers")
	return cmd
}

// policyTestFlags are the flags of `policy test`.
type policyTestFlags struct {
	pcap       string
	explain    []int
	top        int
	maxSources uint32
	trackAfter uint32
	sources    []string
	port       uint16
	local      []string
}

// runPolicyTest replays the capture through the policy at path and prints
// the report as output says.
func runPolicyTest(cmd *cobra.Command, path string, o policyTestFlags, output string) error {
	if o.pcap == "" {
		return errors.New("--pcap is required")
	}
	if o.top < 0 {
		return fmt.Errorf("--top %d: give 0 or more", o.top)
	}
	var addrs []netip.Addr
	for _, a := range o.sources {
		addr, err := netip.ParseAddr(a)
		if err != nil {
			return fmt.Errorf("--source %q: not an IP address", a)
		}
		addrs = append(addrs, addr)
	}
	var local []netip.Prefix
	for _, a := range o.local {
		pfx, err := parseAddrOrPrefix(a)
		if err != nil {
			return fmt.Errorf("--local %q: not an IP address or prefix", a)
		}
		local = append(local, pfx)
	}
	p, err := policy.Load(path)
	if err != nil {
		var list policy.ErrorList
		if errors.As(err, &list) {
			for _, e := range list {
				fmt.Fprintln(cmd.ErrOrStderr(), e)
			}
			return fmt.Errorf("%s: the policy has errors; see `xdplimit policy check`", path)
		}
		return err
	}
	for _, w := range p.Warnings {
		fmt.Fprintln(cmd.ErrOrStderr(), "warning:", w)
	}
	r, err := replay.RunFile(p, o.pcap, replay.Options{
		MaxSources: o.maxSources, TrackAfter: o.trackAfter, Explain: o.explain, Top: o.top,
		Sources: addrs, SourcePort: o.port, Local: local,
	})
	if err != nil {
		return err
	}
	// A capture cut short is replayed up to the cut: a warning,
	// not a failure, as a killed tcpdump leaves every capture.
	for _, w := range r.Warnings() {
		fmt.Fprintln(cmd.ErrOrStderr(), "warning:", w)
	}
	out := cmd.OutOrStdout()
	if output == outputJSON {
		j := policyTestJSON{ReportJSON: r.JSON(), Sources: []metrics.SourceReport{}}
		for _, s := range r.Sources {
			j.Sources = append(j.Sources, metrics.SourceJSON(captureName, s))
		}
		return printJSON(out, j)
	}
	if err := r.Write(out); err != nil {
		return err
	}
	for _, s := range r.Sources {
		fmt.Fprintln(out)
		printSource(out, metrics.SourceJSON(captureName, s), s.Address)
	}
	return nil
}

// captureName stands for the interface in the source reports of a replay.
const captureName = "capture"

// policyTestJSON is the report of `policy test -o json`.
type policyTestJSON struct {
	replay.ReportJSON
	// Sources: what the limiter held for each --source at the end of the
	// capture, as GET /v1/sources/ADDR answers for an interface.
	Sources []metrics.SourceReport `json:"sources"`
}

// parseAddrOrPrefix reads an address (a host prefix) or a prefix.
func parseAddrOrPrefix(s string) (netip.Prefix, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	return p.Masked(), err
}
