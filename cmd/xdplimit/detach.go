package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/xdplimit/xdplimit/agent"
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
			if err := agent.Detach(args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: detached\n", args[0])
			return nil
		},
	}
}
