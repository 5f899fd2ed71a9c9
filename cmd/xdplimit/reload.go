// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/xdplimit/xdplimit/agent"
	"github.com/xdplimit/xdplimit/internal/termsafe"
	"github.com/xdplimit/xdplimit/loader"
)

// reloadWait bounds how long reload waits for the attach process's answer:
// compiling and applying a policy with large lists takes seconds, not
// minutes.
const reloadWait = time.Minute

func newReloadCmd() *cobra.Command {
	var policyPath string
	cmd := &cobra.Command{
		Use:   "reload IFACE",
		Short: "Make the attach process of IFACE re-read its policy, and report the result",
		Long: `reload asks the attach process of IFACE, through its control socket, to re-read
its policy file, waits for the result and prints it: the exit status is non-zero,
with the policy's errors (file:line:column), when the policy is refused; the
previous policy then stays in force. When no attach process runs, --policy FILE
applies a policy to the pinned limiter directly.`,
		Args: cobra.MatchAll(cobra.ExactArgs(1), ifaceNames),
		RunE: func(cmd *cobra.Command, args []string) error {
			iface := args[0]
			ctx, cancel := context.WithTimeout(cmd.Context(), reloadWait)
			defer cancel()
			if policyPath != "" {
				if i, err := agent.AskInfo(ctx, iface); err == nil {
					return fmt.Errorf("attach (pid %d) runs for %s and owns its policy file %s: edit that file, then reload without --policy",
						i.Pid, iface, termsafe.Escape(i.Policy))
				}
				return applyDirectly(cmd, iface, policyPath)
			}
			res, err := agent.AskReload(ctx, iface)
			if errors.Is(err, agent.ErrNoAgent) {
				return reloadWithoutAgent(cmd, iface)
			}
			if err != nil {
				return fmt.Errorf("asking the attach process of %s to reload: %w", iface, err)
			}
			// The attach process's answer quotes its policy file: its
			// path and what compiling it said, text from a file name and a
			// file's contents, printed escaped.
			for _, w := range res.Warnings {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning:", termsafe.EscapeLines(w))
			}
			switch {
			case res.Refused:
				return fmt.Errorf("%s (the previous policy stays in force)", termsafe.EscapeLines(res.Error))
			case !res.OK:
				return fmt.Errorf("%s: %s", iface, termsafe.EscapeLines(res.Error))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: policy %s reloaded\n", iface, termsafe.Escape(res.Policy))
			return nil
		},
	}
	cmd.Flags().StringVar(&policyPath, "policy", "", "apply this policy file when no attach process runs")
	return cmd
}

// reloadWithoutAgent: no control socket answers. An attach of an xdplimit
// from before control sockets still reloads on SIGHUP; else a policy must
// be given to apply directly.
func reloadWithoutAgent(cmd *cobra.Command, iface string) error {
	s, err := loader.Open(iface)
	if err != nil {
		return err
	}
	pid := s.Meta.Pid
	s.Close()
	if !loader.OwnerAlive(pid) {
		return errors.New("no attach process runs for " + iface + ": give --policy FILE to apply one directly")
	}
	if err := syscall.Kill(int(pid), syscall.SIGHUP); err != nil {
		return fmt.Errorf("signalling attach pid %d: %w", pid, err)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s: attach (pid %d) has no control socket (an older xdplimit): sent it SIGHUP; it logs the result\n",
		iface, pid)
	return nil
}

// applyDirectly applies a policy to the pinned limiter of iface, with no
// attach process to hand it to.
func applyDirectly(cmd *cobra.Command, iface, path string) error {
	s, err := loader.Open(iface)
	if err != nil {
		return err
	}
	clock := s.Meta.Clock
	s.Close()
	p, _, err := agent.CompilePolicy(path, cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	if p.Fleet != nil {
		// The sync is the attach process's: nothing runs it after
		// this command exits.
		fmt.Fprintln(cmd.ErrOrStderr(), "warning: no attach process runs to sync the fleet: section with Redis;"+
			" its fleet levels are enforced from this host's state alone until an attach adopts the limiter")
	}
	a, err := loader.Attach(loader.Config{Interface: iface, Policy: p, Clock: clock,
		Warn: func(w string) { fmt.Fprintln(cmd.ErrOrStderr(), "warning:", w) }})
	if err != nil {
		return err
	}
	if a.Migrated != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: the pinned limiter was of map layout %d: migrated (%d bans carried over; every source's state and the counters start afresh)\n",
			a.Migrated.From, a.Migrated.Bans)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s: policy %s applied\n", iface, p.Path)
	return a.Close()
}
