package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/xdplimit/xdplimit/policy"
)

// newPolicyCheckCmd validates a policy file without touching the datapath,
// so a policy can be checked in CI or before `xdplimit reload`.
func newPolicyCheckCmd() *cobra.Command {
	var quiet, strict bool
	cmd := &cobra.Command{
		Use:   "check FILE",
		Short: "Validate a policy file and summarise what it does",
		Long: `check parses and validates a policy file and the list files it names, prints
every error and warning with its file, line and column, and, when the policy
is valid, a summary of what the datapath will do with it.

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
			p, err := policy.Load(path)
			if err != nil {
				var list policy.ErrorList
				if !errors.As(err, &list) {
					return err // the file itself could not be read
				}
				for _, e := range list {
					fmt.Fprintln(cmd.ErrOrStderr(), e)
				}
				return fmt.Errorf("%s: %s", path, count(len(list), "error"))
			}
			for _, w := range p.Warnings {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning:", w)
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
