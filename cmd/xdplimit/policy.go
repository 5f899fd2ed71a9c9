package main

import "github.com/spf13/cobra"

func newPolicyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Check policy files",
	}
	cmd.AddCommand(newPolicyCheckCmd())
	return cmd
}
