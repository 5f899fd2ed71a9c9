// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/xdplimit/xdplimit/loader"
)

func newUnbanCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "unban IFACE CIDR",
		Short: "End the ban of exactly CIDR, made by hand or by a rule",
		Args:  cobra.MatchAll(cobra.ExactArgs(2), ifaceThenCIDR),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := parseCIDR(args[1])
			if err != nil {
				return err
			}
			s, err := loader.Open(args[0])
			if err != nil {
				return err
			}
			defer s.Close()
			found, err := s.Limiter.Unban(p)
			if err != nil {
				return err
			}
			if !found {
				return fmt.Errorf("%s: %s is not banned (see xdplimit bans %s)", args[0], p, args[0])
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: unbanned %s\n", args[0], p)
			return nil
		},
	}
}
