package main

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/xdplimit/xdplimit/agent"
	"github.com/xdplimit/xdplimit/loader"
)

func newReloadCmd() *cobra.Command {
	var policyPath string
	cmd := &cobra.Command{
		Use:   "reload IFACE",
		Short: "Make the attach process of IFACE re-read its policy (SIGHUP)",
		Long: `reload signals the running attach of IFACE to re-read its policy file. When
no attach process runs (it exited with --keep-on-exit), --policy FILE applies
a policy to the pinned limiter directly.`,
		Args: cobra.MatchAll(cobra.ExactArgs(1), ifaceNames),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := loader.Open(args[0])
			if err != nil {
				return err
			}
			pid := s.Meta.Pid
			s.Close()
			if loader.OwnerAlive(pid) {
				if policyPath != "" {
					return fmt.Errorf("attach (pid %d) runs for %s and owns its policy file: edit that file, then reload without --policy", pid, args[0])
				}
				if err := syscall.Kill(int(pid), syscall.SIGHUP); err != nil {
					return fmt.Errorf("signalling attach pid %d: %w", pid, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: asked attach (pid %d) to reload; it logs the result\n", args[0], pid)
				return nil
			}
			if policyPath == "" {
				return errors.New("no attach process runs for " + args[0] + ": give --policy FILE to apply one directly")
			}
			p, _, err := agent.CompilePolicy(policyPath, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if p.Fleet != nil {
				// The sync is the attach process's: nothing runs it after
				// this command exits.
				fmt.Fprintln(cmd.ErrOrStderr(), "warning: no attach process runs to sync the fleet: section with Redis;"+
					" its fleet levels are enforced from this host's state alone until an attach adopts the limiter")
			}
			a, err := loader.Attach(loader.Config{Interface: args[0], Policy: p, Clock: s.Meta.Clock,
				Warn: func(w string) { fmt.Fprintln(cmd.ErrOrStderr(), "warning:", w) }})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: policy %s applied\n", args[0], p.Path)
			return a.Close()
		},
	}
	cmd.Flags().StringVar(&policyPath, "policy", "", "apply this policy file when no attach process runs")
	return cmd
}
