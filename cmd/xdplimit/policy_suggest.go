// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/spf13/cobra"

	"github.com/xdplimit/xdplimit/autopilot"
)

// newPolicySuggestCmd finds the floods in a capture and prints, for each,
// what its packets share and the rule that would hold it.
func newPolicySuggestCmd() *cobra.Command {
	var (
		pcap, baseline string
		det            autopilot.DetectConfig
		cfg            autopilot.Config
	)
	cmd := &cobra.Command{
		Use:   "suggest --pcap CAPTURE [--baseline CAPTURE]",
		Short: "Find the floods in a capture and print the rule for each",
		Long: `suggest reads a pcap or pcapng capture (gzipped or not) and finds its
floods: a destination (address, protocol and port) whose packets in a second
went past --floor and --multiple times its normal rate. The normal rate is
the destination's rate in --baseline, a capture of normal traffic, when
given; else the rate of its quietest quarter of the capture's seconds, so a
flood that fills most of the capture needs a --baseline.

For each flood it prints its fingerprint: the most specific combination of
header fields and payload bytes (source port, TTL and length bands, IP ID,
DSCP, TCP flags, window and option layout, the first 16 payload bytes) that
at least --coverage of the flood's packets share and at most --baseline-max
of the normal traffic to the same destination has. It then prints the rule
that holds what the fingerprint matches to its normal rate, when a rule can
match enough of the fingerprint to spare the normal traffic. A flood that
shares nothing normal traffic lacks gets no rule, and says so.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if pcap == "" {
				return errors.New("--pcap is required")
			}
			if cfg.Coverage <= 0 || cfg.Coverage > 1 || cfg.BaselineMax <= 0 || cfg.BaselineMax >= 1 {
				return fmt.Errorf("--coverage %v and --baseline-max %v: give shares between 0 and 1", cfg.Coverage, cfg.BaselineMax)
			}
			if det.Floor <= 0 || det.Multiple <= 1 {
				return fmt.Errorf("--floor %v and --multiple %v: give a floor above 0 and a multiple above 1", det.Floor, det.Multiple)
			}
			return runPolicySuggest(cmd.OutOrStdout(), cmd.ErrOrStderr(), pcap, baseline, det, cfg)
		},
	}
	cmd.Flags().StringVar(&pcap, "pcap", "", "the capture to search for floods")
	cmd.Flags().StringVar(&baseline, "baseline", "", "a capture of normal traffic to the same hosts")
	cmd.Flags().Float64Var(&det.Floor, "floor", 1000, "packets per second a destination must pass to be flooded")
	cmd.Flags().Float64Var(&det.Multiple, "multiple", 10, "times its normal rate a destination must pass to be flooded")
	cmd.Flags().Float64Var(&cfg.Coverage, "coverage", 0.95, "share of a flood's packets its fingerprint must match")
	cmd.Flags().Float64Var(&cfg.BaselineMax, "baseline-max", 0.001, "largest share of the normal traffic a fingerprint may match")
	return cmd
}

func runPolicySuggest(w, errw io.Writer, pcap, baseline string, det autopilot.DetectConfig, cfg autopilot.Config) error {
	read := func(path string) ([]autopilot.Sample, error) {
		s, cut, err := autopilot.ReadCapture(path)
		if cut != nil {
			fmt.Fprintf(errw, "warning: %s: %v\n", path, cut)
		}
		return s, err
	}
	capture, err := read(pcap)
	if err != nil {
		return err
	}
	var normal []autopilot.Sample
	if baseline != "" {
		if normal, err = read(baseline); err != nil {
			return err
		}
	}
	attacks := autopilot.Detect(capture, normal, det)
	if len(attacks) == 0 {
		fmt.Fprintf(w, "no flood in %s: no destination went past %.0f packets/s and %.0f times its normal rate\n",
			pcap, det.Floor, det.Multiple)
		return nil
	}
	for i, a := range attacks {
		fmt.Fprintf(w, "flood %d: %v, %s to %s, %.0f packets/s (normal %.1f/s)\n", i+1, a.Dest,
			a.Start.UTC().Format("15:04:05"), a.End.UTC().Format("15:04:05"), a.Rate, a.BaselineRate)
		fp, err := autopilot.FindPart(a.Dest, a.Samples, a.Normal, a.Part(), cfg)
		if err != nil {
			fmt.Fprintf(w, "  no rule: %v\n\n", err)
			continue
		}
		fmt.Fprintf(w, "  fingerprint: %v\n", fp)
		in, out := fp.Matchable()
		share := autopilot.Share(a.Normal, in)
		if share > cfg.BaselineMax {
			fmt.Fprintf(w, "  no rule: rules cannot match %s, and the rest of the fingerprint matches %.2f%% of the normal traffic\n\n",
				autopilot.Describe(out, false), 100*share)
			continue
		}
		name := fmt.Sprintf("suggested-%s-%d-%d", strings.ToLower(a.Dest.Proto.String()), a.Dest.Port, i+1)
		rate := uint64(math.Ceil(share * a.BaselineRate))
		fmt.Fprintf(w, "  rule (matches %.3f%% of the normal traffic; held to its normal rate):\nrules:\n%s\n", 100*share, fp.Rule(name, rate))
	}
	return nil
}
