package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/xdplimit/xdplimit/internal/termsafe"
	"github.com/xdplimit/xdplimit/loader"
	"github.com/xdplimit/xdplimit/maps"
)

func newBansCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "bans IFACE",
		Short: "List the bans in force: prefix, origin (rule or manual), reason, time left, packets dropped",
		Args:  cobra.MatchAll(cobra.ExactArgs(1), ifaceNames),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := loader.Open(args[0])
			if err != nil {
				return err
			}
			defer s.Close()
			bans, err := s.Limiter.Bans()
			if err != nil {
				return err
			}
			if asJSON {
				return printBansJSON(cmd.OutOrStdout(), bans)
			}
			printBans(cmd.OutOrStdout(), bans, s.Limiter.BansCapacity())
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON, one object per ban (reasons and origins as stored, JSON-escaped)")
	return cmd
}

// banJSON is a ban as --json prints it.
type banJSON struct {
	Prefix      string  `json:"prefix"`
	Origin      string  `json:"origin"`
	Reason      string  `json:"reason"`
	SecondsLeft float64 `json:"seconds_left"`
	Dropped     uint64  `json:"packets_dropped"`
	Shadow      bool    `json:"shadow"`
}

func printBansJSON(w io.Writer, bans []maps.Ban) error {
	out := make([]banJSON, len(bans))
	for i, b := range bans {
		out[i] = banJSON{Prefix: b.Prefix.String(), Origin: b.Origin, Reason: b.Reason,
			SecondsLeft: b.Left.Seconds(), Dropped: b.Dropped, Shadow: b.Shadow}
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(termsafe.JSON(b), '\n'))
	return err
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
		origin := termsafe.Escape(b.Origin)
		if b.Shadow {
			origin += " (shadow)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", b.Prefix, origin, b.Left.Round(time.Second), b.Dropped, termsafe.Escape(b.Reason))
	}
	tw.Flush()
}
