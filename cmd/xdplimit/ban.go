// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"io"
	"net/netip"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/xdplimit/xdplimit/banfeed"
	"github.com/xdplimit/xdplimit/internal/termsafe"
	"github.com/xdplimit/xdplimit/loader"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/policy"
)

func newBanCmd() *cobra.Command {
	var forS, reason string
	var force bool
	cmd := &cobra.Command{
		Use:   "ban IFACE CIDR",
		Short: "Drop every packet from a source prefix for a while (see `xdplimit bans`)",
		Long: `ban adds CIDR (an address alone is a /32 or /128) to the ban table of the
limiter on IFACE: every packet from it is dropped right after the allow list,
until --for has passed. The table is pinned: the ban holds with or without an
attach process, and across reloads. A prefix already banned gets the new
duration and reason. A full table replaces the ban that ends first.

A prefix wider than the policy's bans.min_prefix (IPv4 /8 and IPv6 /32 by
default; IPv4-mapped prefixes count as IPv4) is refused unless --force: it
would drop a large part of the Internet. A ban forced that way is not shared
with a fleet.`,
		Args: cobra.MatchAll(cobra.ExactArgs(2), ifaceThenCIDR),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := parseCIDR(args[1])
			if err != nil {
				return err
			}
			p = maps.CanonicalBanPrefix(p)
			d, err := policy.ParseBanDuration(forS)
			if err != nil {
				return fmt.Errorf("--for: %w", err)
			}
			stored := termsafe.Escape(reason)
			if len(stored) > maps.BanReasonLen && len(reason) <= maps.BanReasonLen {
				return fmt.Errorf("--reason: reason longer than %d bytes once its control characters are escaped (%s)",
					maps.BanReasonLen, stored)
			}
			if err := maps.CheckBan(p, d, stored); err != nil {
				return fmt.Errorf("--reason: %w", err)
			}
			if src := banfeed.FeedOf(stored); src != "" {
				return fmt.Errorf("--reason: %q starts as the %s feed's bans do, which that feed may lift or replace: "+
					"word it otherwise", stored, src)
			}
			s, err := loader.Open(args[0])
			if err != nil {
				return err
			}
			defer s.Close()
			out := cmd.OutOrStdout()
			if err := checkWidth(out, args[0], p, s.Meta.BanLimits, force); err != nil {
				return err
			}
			if stored != reason {
				fmt.Fprintf(out, "%s: --reason held control characters: stored as %s\n", args[0], stored)
			}
			gone, err := s.Limiter.Ban(p, d, stored)
			if err != nil {
				return err
			}
			if gone.IsValid() {
				fmt.Fprintf(out, "%s: the ban table is full: the ban of %s, which ended first, was replaced\n", args[0], gone)
			}
			how, err := enableBanLookup(s)
			if err != nil {
				return fmt.Errorf("%s banned, but the datapath may not look yet: %w", p, err)
			}
			fmt.Fprintf(out, "%s: banned %s for %v%s\n", args[0], p, d, how)
			return nil
		},
	}
	cmd.Flags().StringVar(&forS, "for", "10m", "how long: 1s to 30d (Go durations like 90s or 12h, or days like 7d)")
	cmd.Flags().StringVar(&reason, "reason", "", fmt.Sprintf("why, shown by `xdplimit bans` (at most %d bytes)", maps.BanReasonLen))
	cmd.Flags().BoolVar(&force, "force", false, "ban a prefix wider than the policy's bans.min_prefix")
	return cmd
}

// checkWidth refuses a prefix wider than the limits of the policy in force
// (recorded in the pinned metadata; the defaults while none is), unless
// forced: then it says what the ban covers.
func checkWidth(out io.Writer, iface string, p netip.Prefix, recorded maps.BanLimits, force bool) error {
	lim := banfeed.Limits(recorded)
	if !banfeed.TooWideFor(p, lim) {
		return nil
	}
	whose := "the policy in force"
	if !recorded.Set {
		whose = "the default: no policy recorded one"
	}
	if !force {
		return fmt.Errorf("%s is wider than /%d, the widest ban bans.min_prefix allows (%s): %s; "+
			"give --force to ban it all the same", p, banfeed.MinBits(p, lim), whose, banfeed.Covers(p))
	}
	fmt.Fprintf(out, "%s: --force: %s; wider than bans.min_prefix /%d, so not shared with a fleet\n",
		iface, banfeed.Covers(p), banfeed.MinBits(p, lim))
	return nil
}

// ifaceThenCIDR checks the interface name of IFACE CIDR arguments.
func ifaceThenCIDR(cmd *cobra.Command, args []string) error {
	return ifaceNames(cmd, args[:min(1, len(args))])
}

// parseCIDR reads a prefix, or an address as its own /32 or /128.
func parseCIDR(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not a CIDR (like 198.51.100.0/24 or 2001:db8::/48) or an address", s)
		}
		return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not a CIDR (like 198.51.100.0/24 or 2001:db8::/48)", s)
	}
	return p, nil
}

// banLookupWait is how long ban waits for a running attach to turn ban
// lookups on after SIGHUP.
const banLookupWait = 5 * time.Second

// enableBanLookup makes the datapath look bans up, if the policy in force
// does not already. The control word is the attach process's to write:
// when one runs it is asked to re-apply its policy (which sees the ban
// table); only without one is the word written here.
func enableBanLookup(s *loader.State) (string, error) {
	on, err := s.Limiter.BanLookupOn()
	if err != nil || on {
		return "", err
	}
	if pid := s.Meta.Pid; loader.OwnerAlive(pid) {
		if err := syscall.Kill(int(pid), syscall.SIGHUP); err != nil {
			return "", fmt.Errorf("signalling attach pid %d: %w", pid, err)
		}
		// A reload that fails (a broken policy file) leaves lookups off:
		// say so rather than report a ban that is not enforced.
		for deadline := time.Now().Add(banLookupWait); ; {
			on, err := s.Limiter.BanLookupOn()
			if err != nil {
				return "", err
			}
			if on {
				return fmt.Sprintf(" (attach pid %d re-applied its policy: ban lookups on)", pid), nil
			}
			if time.Now().After(deadline) {
				return "", fmt.Errorf("attach pid %d did not turn ban lookups on within %v: its reload failed? (see its log; "+
					"the ban is in the table and takes effect at its next successful reload)", pid, banLookupWait)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return "", s.Limiter.EnableBanLookup()
}
