// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/xdplimit/xdplimit/agent"
)

// autopilotWait bounds how long the autopilot commands wait for the attach
// process: a remove puts the rules in force, a reload's work.
const autopilotWait = time.Minute

func newAutopilotCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "autopilot",
		Short: "List, keep or remove the rules the autopilot wrote (docs/autopilot.md)",
		Long: `The autopilot (the policy's autopilot: section) watches samples of every packet,
declares an attack when a destination's rate passes its floor and a multiple of
its baseline, finds what the attack's packets share that normal traffic lacks,
and puts a rule for it ahead of the policy's own; the rule goes when the attack
has stayed below its threshold for the section's expire. These commands ask the
attach process of IFACE through its control socket.`,
	}
	cmd.AddCommand(newAutopilotListCmd(), newAutopilotRuleCmd("keep"), newAutopilotRuleCmd("remove"))
	return cmd
}

func newAutopilotListCmd() *cobra.Command {
	var out *string
	cmd := &cobra.Command{
		Use:   "list IFACE",
		Short: "List the generated rules, their fingerprints, evidence and age, and the attacks in progress",
		Args:  cobra.MatchAll(cobra.ExactArgs(1), ifaceNames),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), autopilotWait)
			defer cancel()
			v, err := agent.AskAutopilot(ctx, args[0])
			if err != nil {
				return autopilotErr(args[0], err)
			}
			if *out == outputJSON {
				return printJSON(cmd.OutOrStdout(), v)
			}
			printAutopilot(cmd.OutOrStdout(), v, time.Now())
			return nil
		},
	}
	out = addOutputFlag(cmd)
	return cmd
}

func newAutopilotRuleCmd(verb string) *cobra.Command {
	short := map[string]string{
		"keep":   "Keep a generated rule past its attack, and print it as YAML to paste into the policy",
		"remove": "Remove a generated rule now; no other is written for its destination until its attack ends",
	}[verb]
	return &cobra.Command{
		Use:   verb + " IFACE RULE",
		Short: short,
		Args: cobra.MatchAll(cobra.ExactArgs(2), func(c *cobra.Command, args []string) error {
			return ifaceNames(c, args[:1])
		}),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), autopilotWait)
			defer cancel()
			ask := agent.AskAutopilotKeep
			if verb == "remove" {
				ask = agent.AskAutopilotRemove
			}
			r, err := ask(ctx, args[0], args[1])
			if err != nil {
				return autopilotErr(args[0], err)
			}
			w := cmd.OutOrStdout()
			if verb == "remove" {
				fmt.Fprintf(w, "removed %s (%s: %s)\n", r.Name, r.Dest, r.Fingerprint)
				return nil
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "kept %s; paste it under rules: in the policy, then reload: the policy's rule of that name replaces the generated one\n", r.Name)
			fmt.Fprintf(w, "  # %s: %s\n%s", r.Dest, r.Fingerprint, r.YAML)
			return nil
		},
	}
}

func autopilotErr(iface string, err error) error {
	if errors.Is(err, agent.ErrNoAgent) {
		return fmt.Errorf("no attach process runs for %s: the autopilot runs inside xdplimit attach", iface)
	}
	return fmt.Errorf("%s: %w", iface, err)
}

// printAutopilot prints v for a terminal.
func printAutopilot(w io.Writer, v agent.AutopilotView, now time.Time) {
	if !v.On {
		fmt.Fprintf(w, "%s: the policy in force has no autopilot: section\n", v.Interface)
		return
	}
	fmt.Fprintf(w, "%s: autopilot on (mode %s, action %s): %s, %s in progress\n",
		v.Interface, v.Mode, v.Action, plural(len(v.Rules), "rule"), plural(len(v.Attacks), "attack"))
	if len(v.Rules) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "\nRULE\tDEST\tAGE\tLAST ATTACK\tATTACK\tNORMAL\tFINGERPRINT")
		for _, r := range v.Rules {
			flags := ""
			if r.Kept {
				flags += " (kept)"
			}
			if r.Shadow {
				flags += " (shadow)"
			}
			fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s ago\t%.1f%% of %d\t%.2f%% of %d\t%s\n", r.Name, flags, r.Dest,
				time.Duration(r.AgeSeconds*float64(time.Second)).Round(time.Second), now.Sub(r.LastAttack).Round(time.Second),
				100*r.Coverage, r.AttackSamples, 100*r.BaselineShare, r.BaselineSamples, r.Fingerprint)
		}
		tw.Flush()
	}
	for _, a := range v.Attacks {
		s := fmt.Sprintf("attack on %s since %s ago: peak %.0f packets/s, baseline %.0f", a.Dest,
			now.Sub(a.Since).Round(time.Second), a.PeakRate, a.BaselineRate)
		switch {
		case a.Dismissed:
			s += "; its rule was removed by an operator"
		case a.NoRule != "":
			s += "; no rule: " + a.NoRule
		}
		fmt.Fprintln(w, strings.TrimSpace(s))
	}
}

// plural is "1 rule", "2 rules".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
