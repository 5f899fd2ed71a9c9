// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/xdplimit/xdplimit/banfeed"
	"github.com/xdplimit/xdplimit/internal/termsafe"
	"github.com/xdplimit/xdplimit/loader"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/metrics"
)

func newBansCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "bans IFACE",
		Short: "List the bans in force: prefix, origin (rule, feed or manual), reason, time left, packets dropped",
		Args:  cobra.MatchAll(cobra.ExactArgs(1), ifaceNames),
	}
	output := addOutputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		s, err := loader.Open(args[0])
		if err != nil {
			return err
		}
		defer s.Close()
		bans, err := s.Limiter.Bans()
		if err != nil {
			return err
		}
		if asJSON || *output == outputJSON {
			return printJSON(cmd.OutOrStdout(), metrics.BansJSON(bans))
		}
		printBans(cmd.OutOrStdout(), bans, s.Limiter.BansCapacity())
		return nil
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "the same as -o json: one object per ban (reasons and origins as stored, JSON-escaped)")
	return cmd
}

func printBans(w io.Writer, bans []maps.Ban, capacity uint32) {
	fmt.Fprintf(w, "%d bans of %d\n", len(bans), capacity)
	if len(bans) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PREFIX\tORIGIN\tLEFT\tDROPPED\tREASON")
	for _, b := range bans {
		// Reasons and origins come from outside (the fleet, feeds, any
		// root process writing the pinned table): escaped, whatever
		// checked them on the way in.
		origin := termsafe.Escape(banfeed.Origin(b))
		if b.Shadow {
			origin += " (shadow)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", b.Prefix, origin, b.Left.Round(time.Second), b.Dropped, termsafe.Escape(b.Reason))
	}
	tw.Flush()
}
