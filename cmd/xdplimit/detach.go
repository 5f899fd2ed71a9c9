// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/xdplimit/xdplimit/agent"
)

func newDetachCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "detach IFACE",
		Short: "Detach the limiter from an interface and remove its pins",
		Long: `detach removes the limiter of IFACE: the program leaves the interface, and its
pins (every source's state, the bans, the counters) are removed. It is the one
way to remove a limiter that an attach process left attached when it exited
or was killed. A running attach process holds the interface: stop it first
(systemctl stop xdplimit@IFACE), then detach.`,
		Args: cobra.MatchAll(cobra.ExactArgs(1), ifaceNames),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Second)
			defer cancel()
			if i, err := agent.AskInfo(ctx, args[0]); err == nil {
				return fmt.Errorf("attach (pid %d) runs for %s: stop it first (systemctl stop xdplimit@%[2]s, or SIGTERM), then detach",
					i.Pid, args[0])
			}
			if err := agent.Detach(args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: detached\n", args[0])
			return nil
		},
	}
}
