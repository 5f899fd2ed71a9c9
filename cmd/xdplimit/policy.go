// SPDX-License-Identifier: Apache-2.0

package main

import "github.com/spf13/cobra"

func newPolicyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Check policy files and test them on captures",
	}
	cmd.AddCommand(newPolicyCheckCmd(), newPolicyTestCmd(), newPolicySuggestCmd())
	return cmd
}
