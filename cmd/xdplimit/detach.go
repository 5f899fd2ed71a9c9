package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/xdplimit/xdplimit/loader"
)

func newDetachCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "detach IFACE",
		Short: "Detach the limiter from an interface and remove its pins",
		Long: `detach removes a limiter left attached by an attach that exited with
--keep-on-exit or was killed. A running attach holds the interface: stop it
with SIGTERM instead, which detaches.`,
		Args: cobra.MatchAll(cobra.ExactArgs(1), ifaceNames),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := loader.Detach(args[0]); err != nil {
				return err
			}
			// An attach killed with a fleet sync running left its status
			// file; the limiter it described is gone now.
			os.Remove(fleetStatusPath(args[0]))
			fmt.Fprintf(cmd.OutOrStdout(), "%s: detached\n", args[0])
			return nil
		},
	}
}
