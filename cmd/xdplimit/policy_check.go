// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/xdplimit/xdplimit/agent"
	"github.com/xdplimit/xdplimit/policy"
)

// newPolicyCheckCmd validates a policy file without touching the datapath,
// so a policy can be checked in CI or before `xdplimit reload`. It runs
// agent.CompilePolicy, what attach and reload run: it passes if and only if
// they would accept the file.
func newPolicyCheckCmd() *cobra.Command {
	var quiet, strict bool
	cmd := &cobra.Command{
		Use:   "check FILE",
		Short: "Validate a policy file and summarise what it does",
		Long: `check reads a policy file exactly as attach and reload do: it parses and
validates it and the list files it names, compiles it, and reads the fleet's
password file; it prints every error and warning (with file, line and column
where the policy says it), and, when attach would accept the policy, a summary
of what the datapath will do with it.

The exit status is non-zero when the policy has errors, or with --strict
when it has warnings.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := args[0]
			count := func(n int, what string) string {
				if n == 1 {
					return "1 " + what
				}
				return fmt.Sprintf("%d %ss", n, what)
			}
			_, p, err := agent.CompilePolicy(path, cmd.ErrOrStderr())
			if err != nil {
				var list policy.ErrorList
				if !errors.As(err, &list) {
					return err // unreadable files, a policy too big to compile, a password file
				}
				for _, e := range list {
					fmt.Fprintln(cmd.ErrOrStderr(), e)
				}
				return fmt.Errorf("%s: %s", path, count(len(list), "error"))
			}
			if !quiet {
				p.Describe(cmd.OutOrStdout())
			}
			if strict && len(p.Warnings) > 0 {
				return fmt.Errorf("%s: %s (--strict)", path, count(len(p.Warnings), "warning"))
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only errors and warnings, not the summary")
	cmd.Flags().BoolVar(&strict, "strict", false, "fail when the policy has warnings")
	return cmd
}
